"""Every broken pipeline in tests/bad_pipelines/ is refused cleanly by `validate` and `apply`.

Each case (see bad_pipelines/cases.yaml) must exit 2 and print one message naming
file:line:column, with no traceback, from both commands; `--json` gives one error document.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from runner.cli.app import cli

from .conftest import Result

HERE = Path(__file__).resolve().parent / "bad_pipelines"
CASES: dict[str, dict[str, Any]] = yaml.safe_load((HERE / "cases.yaml").read_text("utf-8"))


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A copy, so an apply that wrongly got as far as opening state would not litter the repo.
    target = tmp_path_factory.mktemp("bad") / "bad_pipelines"
    shutil.copytree(HERE, target)
    return target


def run_cli(cwd: Path, *args: str) -> Result:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return Result(res.exit_code, res.stdout, res.stderr)


def test_every_file_has_a_case_and_there_are_enough() -> None:
    files = {p.name for p in HERE.glob("*.yaml")} - {"cases.yaml"}
    assert files == set(CASES)
    assert len(files) >= 30


def _check(case: dict[str, Any], name: str, res: Result, command: str) -> None:
    assert res.exit_code == 2, (command, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    where = f"{case.get('file', name)}:{case['line']}:{case['column']}: "
    assert where in res.stderr, (command, res.stderr)
    assert case["message"] in res.stderr, (command, res.stderr)
    if "hint" in case:
        assert "hint: " in res.stderr and case["hint"] in res.stderr.split("hint: ", 1)[1]
    # One message, not a cascade.
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")] == [
        res.stderr.splitlines()[0]
    ], res.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_refuses(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "validate", name)
    _check(CASES[name], name, res, "validate")
    assert res.stdout == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_apply_refuses_before_running_anything(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "apply", name, "--json", "--state", str(bad_dir.parent / "state"))
    _check(CASES[name], name, res, "apply")
    doc = res.json
    assert doc["exit_code"] == 2
    step = doc["error"]["step"]
    assert CASES[name]["message"] in (f"step '{step}': " if step else "") + doc["error"]["message"]
    assert (
        doc["error"]["where"] == f"{CASES[name].get('file', name)}:{CASES[name]['line']}:"
        f"{CASES[name]['column']}"
    )
    assert not (bad_dir.parent / "state").exists()
    assert not (bad_dir / ".runner").exists()


# -- `-p` overrides: a command-line mistake is a usage error pointing at the declaration ----------

OVERRIDES = [
    # args, message fragment, hint fragment, line:column of the declaration (None: no location)
    (
        ["-p", "video_id=v", "-p", "titel=x"],
        "unknown param 'titel' (-p titel=...)",
        "did you mean 'title'?",
        "3:1",
    ),
    (
        ["-p", "video_id=v", "-p", "count=abc"],
        "param 'count' must be integer, found string 'abc' (from -p count=abc)",
        None,
        "5:3",
    ),
    (
        ["-p", "video_id=v", "-p", "count=0"],
        "param 'count': 0 is less than the minimum of 1",
        None,
        "5:3",
    ),
    (
        ["-p", "video_id=v", "-p", "mode=medium"],
        "param 'mode': 'medium' is not one of",
        None,
        "6:3",
    ),
    (
        ["-p", "video_id=v", "-p", "count=[1, 2]"],
        "param 'count' must be integer, found a list",
        None,
        "5:3",
    ),
    ([], "param 'video_id' is required", "pass it with -p video_id=VALUE", "7:3"),
    (["-p", "video_id"], "-p expects KEY=VALUE, got 'video_id'", None, None),
]


@pytest.mark.parametrize("command", ["validate", "apply"])
@pytest.mark.parametrize(("args", "message", "hint", "where"), OVERRIDES)
def test_bad_overrides(
    bad_dir: Path, command: str, args: list[str], message: str, hint: str | None, where: str | None
) -> None:
    res = run_cli(bad_dir / "overrides", command, "params.yaml", *args)
    assert res.exit_code == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert message in res.stderr
    if hint:
        assert f"hint: {hint}" in res.stderr
    if where:
        assert f"params.yaml:{where}: " in res.stderr
    assert not (bad_dir / "overrides" / ".runner").exists()


def test_good_overrides_pass(bad_dir: Path) -> None:
    res = run_cli(
        bad_dir / "overrides",
        "validate",
        "params.yaml",
        "-p",
        "video_id=42",
        "-p",
        "count=3",
        "-p",
        "title=123",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    assert res.json == {"pipeline": "overrides", "valid": True, "steps": 1, "exit_code": 0}


@pytest.fixture
def chdir_bad(bad_dir: Path) -> Iterator[Path]:
    old = Path.cwd()
    os.chdir(bad_dir)
    try:
        yield bad_dir
    finally:
        os.chdir(old)


@pytest.mark.parametrize(
    "name",
    [
        "missing_template.yaml",
        "path_parent.yaml",
        "path_absolute.yaml",
        "template_var_missing.yaml",
    ],
)
def test_step_type_validate_errors_name_the_step(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "validate", name)
    assert "step 'a': " in res.stderr


def test_a_deleted_working_directory_is_a_clean_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = tmp_path / "gone"
    script = f'mkdir "{gone}" && cd "{gone}" && rmdir "{gone}" && exec "$0" -m runner "$@"'
    proc = subprocess.run(
        ["/bin/sh", "-c", script, sys.executable, "apply", "pipeline.yaml", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "current directory no longer exists" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert '"exit_code": 2' in proc.stdout
