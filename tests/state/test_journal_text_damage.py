"""Damaged journal text never bricks runner (issue 33, item 5).

SQLite stores whatever bytes it is given: invalid UTF-8 in runs.item, runs.params, calls.result
or executions.step_id crashed runs list/show, export, gc, plan and apply, and verify said "ok"
(so repair did nothing) or crashed itself; 100k-deep JSON in runs.params gave RecursionError.
Now every command reads such a row (or says the record is damaged and how to mend it), verify
names each damaged cell from its bytes, and verify --repair mends them. A NaN a step type puts
in its output fails that step; the run ends.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest

from runner.steps.base import StepContext, StepResult, StepType
from runner.steps.registry import default_registry
from tests.conftest import Project, runner_bin

PIPE = """\
runner: 1
name: dmg
params:
  who: {type: string, default: me}
steps:
  a: {uses: shell, with: {run: "echo ${{ params.who }}"}}
  b:
    uses: llm
    with: {prompt: "hi ${{ params.who }}"}
    check: ["${{ output.text | length > 0 }}"]
"""

DAMAGE = {
    "runs.item": "UPDATE runs SET item=CAST(X'61ff62' AS TEXT)",
    "runs.params": "UPDATE runs SET params=CAST(X'7b2261223a22ff227d' AS TEXT)",
    "runs.params deep": "UPDATE runs SET params='" + "[" * 100_000 + "]" * 100_000 + "'",
    "runs.params NaN": """UPDATE runs SET params='{"who": NaN}'""",
    "calls.result": "UPDATE calls SET result=CAST(X'7b2274657874223a22ff227d' AS TEXT)",
    "executions.step_id": "UPDATE executions SET step_id=CAST(X'61ff' AS TEXT) WHERE step_id='a'",
}

COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "RUN", "--json"),
    ("runs", "show", "RUN"),
    ("export", "RUN", "--to", "out"),
    ("gc", "--keep-last", "1"),
    ("plan", "p.yaml"),
    ("apply", "p.yaml"),
]


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), *args], cwd=root, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("where", list(DAMAGE))
def test_no_command_crashes_and_verify_repair_mends(tmp_path: Path, where: str) -> None:
    (tmp_path / "p.yaml").write_text(PIPE)
    # the journal to damage, made in-process; every command after the damage is a runner process
    assert Project(tmp_path).cli("apply", "p.yaml", "-q").exit_code == 0
    db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
    run_id = db.execute("SELECT id FROM runs").fetchone()[0]
    db.execute(DAMAGE[where])
    db.commit()
    db.close()

    seen = _runner(tmp_path, "verify", "--json")
    assert seen.returncode == 1, seen.stdout + seen.stderr
    table, column = where.split()[0].split(".")
    problems = json.loads(seen.stdout)["problems"]
    assert any(p.startswith(f"journal record {table} #") and column in p for p in problems), (
        problems
    )
    if where == "runs.params deep":  # a command that cannot read it names the record
        shown = _runner(tmp_path, "runs", "show", run_id, "--json")
        assert f"damaged record (run {run_id} params)" in shown.stderr, shown.stderr
        assert "runner verify --repair" in shown.stderr
    for command in COMMANDS:
        args = [run_id if a == "RUN" else a for a in command]
        res = _runner(tmp_path, *args)
        assert "Traceback" not in res.stderr, (command, res.stderr[-2000:])
        assert "runner hit a bug" not in res.stderr, (command, res.stderr[-2000:])
        if res.returncode not in (0, 2) and "damaged record" in res.stderr:
            assert "verify --repair" in res.stderr, (command, res.stderr)

    mended = _runner(tmp_path, "verify", "--repair", "--yes", "--json")
    assert mended.returncode == 0, mended.stdout + mended.stderr
    after = _runner(tmp_path, "verify", "--json")
    assert json.loads(after.stdout)["ok"] is True, after.stdout
    shown = _runner(tmp_path, "runs", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert _runner(tmp_path, "apply", "p.yaml").returncode == 0


class NotANumber(StepType):
    """A plugin's step type that puts a NaN in its output."""

    name: ClassVar[str] = "not_a_number_test"

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        return StepResult(output={"score": float("nan")})


def test_a_nan_in_an_output_fails_the_step_and_the_run_ends(project: Project) -> None:
    default_registry().register(NotANumber())
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: nan
        steps:
          score: {uses: not_a_number_test}
          after: {uses: shell, needs: [score], with: {run: "echo after"}}
          beside: {uses: shell, with: {run: "echo beside"}}
        """,
    )
    doc = project.apply()
    assert doc["_exit"] == 6, doc["_stderr"]  # partial: one step failed, one beside it ran
    steps = {s["id"]: s for s in doc["steps"]}
    assert steps["score"]["status"] == "failed"
    assert "cannot be recorded" in steps["score"]["reason"], steps["score"]
    assert steps["beside"]["status"] == "ran" and steps["after"]["status"] == "skipped"
    listed = project.cli("runs", "list", "--json", "--state", ".runner").json["runs"]
    assert [r["status"] for r in listed] == ["partial"]
