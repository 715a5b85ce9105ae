"""The `runner` process collects no garbage while it starts (entry.py): every command but apply
gets the collector back before it runs, apply as its run starts, with start-up's objects frozen.
Under CliRunner (a host process) the collector is never touched."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.surfaces.cli.app import cli

PIPELINE = """\
runner: 1
name: one
steps:
  a:
    uses: shell
    with: {run: "echo hi > out.txt", outputs: [out.txt]}
"""

# The console command, then what its collector was left as (a step's command checks it too).
PROBE = """
import gc, json, sys
sys.argv = ["runner", *json.loads(sys.argv[1])]
from runner.surfaces.cli.entry import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
with open("gc.json", "w") as f:
    json.dump({"code": code, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}, f)
"""


def _probe(cwd: Path, *args: str) -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    found: dict[str, object] = json.loads((cwd / "gc.json").read_text())
    assert found["code"] in (0, None), res.stderr
    return found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "runner.toml").write_text("# marks the project root\n")
    return tmp_path


def test_apply_runs_with_the_collector_on_and_start_up_frozen(root: Path) -> None:
    found = _probe(root, "apply", "pipeline.yaml", "-q")
    assert (root / "out.txt").read_text() == "hi\n"
    assert found["enabled"] is True
    assert isinstance(found["frozen"], int) and found["frozen"] > 10_000


@pytest.mark.parametrize("args", [("graph", "pipeline.yaml"), ("steps",)])
def test_other_commands_run_with_the_collector_on(root: Path, args: tuple[str, ...]) -> None:
    found = _probe(root, *args)
    assert found["enabled"] is True
    assert found["frozen"] == 0


def test_a_host_process_collector_is_left_alone(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)
    was = gc.isenabled()  # (an in-process `runner validate` earlier in the session turns it off)
    gc.enable()
    try:
        frozen = gc.get_freeze_count()
        res = CliRunner().invoke(cli, ["apply", "pipeline.yaml", "-q"], catch_exceptions=False)
        assert res.exit_code == 0
        assert gc.isenabled()
        assert gc.get_freeze_count() == frozen
    finally:
        if not was:
            gc.disable()
