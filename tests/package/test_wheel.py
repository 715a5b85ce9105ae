"""The package as a user gets it: `python -m build` makes an sdist and a wheel from the tree, and
the wheel alone, installed in a fresh venv (no editable install, no source tree on sys.path, run
from a folder outside the repository), runs the first hour: `runner --version`, `runner init
demo && cd demo && runner apply pipeline.yaml`, and `runner serve`'s page with its static files.

Slow (a build in an isolated environment, a venv, the dependencies from the registry: ~20-30 s)
and in need of the registry, so it is its own tier: `pytest -m package tests/package`, a step of
.ci/run after the unit suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import runner

pytestmark = pytest.mark.package

REPO = Path(__file__).resolve().parents[2]
DIST_NAME = "runner-pipelines"


@dataclass
class Built:
    wheel: Path
    sdist: Path


_NOT_SOURCE = {".git", ".venv", "venv", ".runner", "__pycache__", "build", "dist", ".mypy_cache"}


def _tree_files() -> list[str]:
    """The files of the working tree as a clone would have them: tracked and new (not ignored);
    outside a git checkout (an unpacked sdist or export), every file but caches and builds."""
    res = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
    )
    if res.returncode == 0:
        listed = res.stdout.decode().split("\0")
        return sorted({f for f in listed if f and os.path.lexists(REPO / f)})
    out = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _NOT_SOURCE and not d.endswith(".egg-info")]
        here = Path(folder)
        for name in files + [d for d in dirs if (here / d).is_symlink()]:
            out.append((here / name).relative_to(REPO).as_posix())
    return sorted(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    # Built from a copy, so the build's own folders (build/, *.egg-info) never land in the tree.
    src = tmp_path_factory.mktemp("src")
    for rel in _tree_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_symlink():  # runner/pipeline/schemas -> ../../schemas, as in git
            os.symlink(os.readlink(REPO / rel), dest)
        else:
            shutil.copy2(REPO / rel, dest)
    dist = tmp_path_factory.mktemp("dist")
    # The wheel is built from the sdist (build's default): what the sdist lacks, the wheel lacks.
    res = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return Built(wheel, sdist)


# The installed command's warm servers (runner/warm: on, as for a user) keep their sockets in a
# folder of the module's, and are stopped when its tests end.
SERVERS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _stop_servers() -> Iterator[None]:
    SERVERS.append(tempfile.mkdtemp(prefix="rs-wheel-", dir="/tmp"))  # a socket path: <108 bytes
    yield
    from runner.warm import control

    folder = SERVERS.pop()
    control.stop_all(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put this tree or its state on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["RUNNER_SERVER_DIR"] = SERVERS[-1]
    return env


# the spawner's C loop: its source in the sdist, built in the wheel (a module and a program)
_COMPILED = (".c", ".h", ".so", "_spawnc_exec")


def _package_data() -> set[str]:
    """Every file under runner/ that is not Python or C source (or built from it), as its path
    inside the package (a linked folder's files under the link's name, as the wheel holds
    them)."""
    out = set()
    for folder, dirs, files in os.walk(REPO / "runner", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".py", ".pyc", *_COMPILED)):
                out.add((Path(folder) / name).relative_to(REPO).as_posix())
    return out


def test_the_wheel_is_named_for_the_registry_and_holds_every_file_the_command_reads(
    built: Built,
) -> None:
    names = set(zipfile.ZipFile(built.wheel).namelist())
    if sys.platform == "linux" and shutil.which("cc"):
        # the sandbox spawner's C loop, built (setup.py): a wheel for this platform
        tag = re.fullmatch(
            rf"runner_pipelines-{re.escape(runner.__version__)}-(cp\d+)-(cp\d+)-linux_\w+\.whl",
            built.wheel.name,
        )
        assert tag, built.wheel.name
        assert any(re.fullmatch(r"runner/expr/_spawnc\..*\.so", n) for n in names), names
        program = zipfile.ZipFile(built.wheel).getinfo("runner/expr/_spawnc_exec")
        assert (program.external_attr >> 16) & 0o111, "the spawner's program is not executable"
    else:
        assert built.wheel.name == f"runner_pipelines-{runner.__version__}-py3-none-any.whl"
    data = _package_data()
    # the schemas, the page's static files and templates, the image profiles, py.typed
    assert {
        "runner/pipeline/schemas/pipeline.schema.json",
        "runner/surfaces/web/static/app.js",
        "runner/surfaces/web/templates/run.html",
        "runner/py.typed",
    } <= data
    assert data - names == set(), "files the wheel leaves out (pyproject's package-data)"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(built.wheel).read(meta).decode()
    assert f"Name: {DIST_NAME}\n" in text and f"Version: {runner.__version__}\n" in text
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "runner = runner.surfaces.cli:main" in zipfile.ZipFile(built.wheel).read(entry).decode()


def test_the_sdist_holds_the_package_data_and_the_changelog(built: Built) -> None:
    with tarfile.open(built.sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert _package_data() - names == set()
    assert {"README.md", "CHANGELOG.md", "pyproject.toml", "setup.py"} <= names
    # the C loop's sources, so that an install from the sdist builds it
    sources = ("_spawnc.c", "_spawnc_rules.c", "_spawnc.h", "_spawnc_main.c", "_spawnc_module.c")
    assert {f"runner/expr/{name}" for name in sources} <= names


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) holding the wheel and its dependencies."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    res = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(built.wheel),
        ],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return env_dir


def _run(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(env_dir / "bin" / "runner"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    assert REPO not in tmp_path.parents
    return tmp_path


def _module_file(installed: Path, outside: Path, module: str) -> Path:
    """Where the venv's interpreter imports ``module`` from."""
    res = subprocess.run(
        [str(installed / "bin" / "python"), "-c", f"import {module} as m; print(m.__file__)"],
        cwd=outside,
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert res.returncode == 0, res.stderr
    return Path(res.stdout.strip())


def test_a_fresh_venv_with_the_wheel_alone_runs_the_first_hour(
    installed: Path, outside: Path
) -> None:
    where = _module_file(installed, outside, "runner")
    assert where.is_relative_to(installed), where  # the wheel's copy, not this tree
    if sys.platform == "linux" and shutil.which("cc"):  # the sandbox spawner's C loop came with it
        compiled = _module_file(installed, outside, "runner.expr._spawnc")
        assert compiled.is_relative_to(installed), compiled
        program = compiled.with_name("_spawnc_exec")
        assert os.access(program, os.X_OK), program

    version = _run(installed, outside, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"runner, version {runner.__version__}"

    init = _run(installed, outside, "init", "demo")
    assert init.returncode == 0, init.stderr
    assert "created pipeline.yaml" in init.stdout
    demo = outside / "demo"
    applied = _run(installed, demo, "apply", "pipeline.yaml", "--json")
    assert applied.returncode == 0, applied.stderr
    doc = json.loads(applied.stdout)
    assert doc["run"]["status"] == "completed", doc
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert steps and set(steps.values()) == {"ran"}, steps
    assert "greet" in steps  # the starter's llm step ran on the fake provider
    again = _run(installed, demo, "apply", "pipeline.yaml", "--json")
    assert again.returncode == 0, again.stderr
    assert {s["status"] for s in json.loads(again.stdout)["steps"]} == {"cached"}

    # the first apply started a warm server: once it is up, an apply forks from it
    def served() -> list[int]:
        status = _run(installed, outside, "server", "status", "--json")
        return [s["served"] for s in json.loads(status.stdout)["servers"]]

    deadline = time.monotonic() + 60
    while not served():
        assert time.monotonic() < deadline, "the installed command started no warm server"
        time.sleep(0.1)
    (before,) = served()
    forced = _run(installed, demo, "apply", "pipeline.yaml", "--json", "--force", "greet")
    assert forced.returncode == 0, forced.stderr
    assert {s["id"]: s["status"] for s in json.loads(forced.stdout)["steps"]}["greet"] == "ran"
    assert served() == [before + 1]


@pytest.fixture()
def served(installed: Path, outside: Path) -> Iterator[str]:
    assert _run(installed, outside, "init", "demo").returncode == 0
    assert _run(installed, outside / "demo", "apply", "pipeline.yaml").returncode == 0
    env = _clean_env()
    proc = subprocess.Popen(
        [str(installed / "bin" / "runner"), "serve", "--port", "0", "--token", "tok"],
        cwd=outside / "demo",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    with proc:  # closes the pipe
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            assert found, line
            yield found.group(0)
        finally:
            proc.terminate()  # only the server this fixture started
            proc.wait(timeout=30)


def test_the_installed_page_serves_its_templates_and_static_files(served: str) -> None:
    def get(path: str) -> tuple[int, str]:
        req = urllib.request.Request(served + path, headers={"X-Runner-Token": "tok"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()

    status, page = get("/")
    assert status == 200 and "hello" in page  # the runs page, rendered from the templates
    for name in ("app.js", "app.css", "graph.js", "values.js"):
        status, body = get(f"/static/{name}")
        assert status == 200 and body.strip(), name
