"""The default install never imports dask: `runner --help` and a local apply load neither dask
nor distributed (start-up time unchanged by the Dask executor's existence)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _imported(args: list[str], cwd: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    modules = set()
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    assert "runner.surfaces.cli" in modules  # the measurement saw runner's own imports
    return modules


def _dask(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in ("dask", "distributed")}


def test_help_does_not_import_dask(tmp_path: Path) -> None:
    assert _dask(_imported(["--help"], tmp_path)) == set()


def test_a_local_apply_does_not_import_dask(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\nname: h\nsteps:\n  a:\n    uses: hash\n    with: {value: x}\n"
        "  b:\n    uses: shell\n    with: {run: 'echo hi'}\n",
        encoding="utf-8",
    )
    modules = _imported(["apply", "pipeline.yaml", "-q", "--state", ".runner"], tmp_path)
    assert "runner.engine.run.apply" in modules  # it did run the pipeline here
    assert _dask(modules) == set()


def test_a_shell_apply_without_expressions_does_not_import_jinja2(tmp_path: Path) -> None:
    """jinja2 is the expression language's engine: a pipeline with no ``${{ }}`` never needs it."""
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\nname: h\nsteps:\n  a:\n    uses: shell\n"
        "    with: {run: 'echo hi > a.txt', outputs: [a.txt]}\n"
        "  b:\n    uses: shell\n    needs: [a]\n"
        "    with: {run: 'cat a.txt > b.txt', inputs: [a.txt], outputs: [b.txt]}\n",
        encoding="utf-8",
    )
    modules = _imported(["apply", "pipeline.yaml", "-q", "--state", ".runner"], tmp_path)
    assert "runner.engine.run.apply" in modules
    assert (tmp_path / "b.txt").read_text() == "hi\n"
    assert {m for m in modules if m.split(".")[0] in ("jinja2", "markupsafe")} == set()
    # the same pipeline with a value in its command does load it, and renders it
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\nname: h\nsteps:\n  a:\n    uses: shell\n"
        "    with: {run: 'echo ${{ 1 + 1 }} > a.txt', outputs: [a.txt]}\n",
        encoding="utf-8",
    )
    modules = _imported(["apply", "pipeline.yaml", "-q", "--state", ".runner"], tmp_path)
    assert "jinja2" in modules
    assert (tmp_path / "a.txt").read_text() == "2\n"
