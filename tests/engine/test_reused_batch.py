"""Steps a watch cycle reuses are answered in one pass (Scheduler.run's ``owed``): every
reader sees what answering them one by one wrote -- the same events in the same order, the
same journal rows (executions and events, in id and seq order) and the same outcomes."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run import interpreter as interpreter_module
from runner.engine.run import reusedsteps
from runner.engine.run.apply import State, apply_plan
from runner.engine.run.events import RecordingReporter
from runner.engine.run.options import ApplyOptions
from runner.engine.run.outcomes import RunReport, StepStatus
from runner.pipeline.compiler import compile_pipeline

# A DAG where reused steps and others meet: `a` reads the edited file (below `x` and `y`,
# reused); `f` is left out of the reuse set (answered by its key's result, between owed
# ones); `g` is reused but below `f` (not owed: through `now`); `w` is reused with a `when:`
# (a task, as before).
PIPELINE = """\
runner: 1
name: batch
steps:
  b: {uses: shell, with: {run: "cat src/b.txt > out/b.txt", inputs: [src/b.txt], outputs: [out/b.txt]}}
  c: {uses: shell, needs: [b], with: {run: "cat out/b.txt > out/c.txt", inputs: [out/b.txt], outputs: [out/c.txt]}}
  f: {uses: shell, needs: [b], with: {run: "echo f > out/f.txt", outputs: [out/f.txt]}}
  g: {uses: shell, needs: [f], with: {run: "echo g > out/g.txt", outputs: [out/g.txt]}}
  w: {uses: shell, needs: [c], when: "${{ true }}", with: {run: "echo w > out/w.txt", outputs: [out/w.txt]}}
  a: {uses: shell, needs: [y], with: {run: "cat src/a.txt > out/a.txt", inputs: [src/a.txt], outputs: [out/a.txt]}}
  d: {uses: shell, needs: [a, c], with: {run: "cat out/a.txt out/c.txt > out/d.txt", inputs: [out/a.txt, out/c.txt], outputs: [out/d.txt]}}
  x: {uses: shell, with: {run: "echo x > out/x.txt", outputs: [out/x.txt]}}
  y: {uses: shell, needs: [x], with: {run: "echo y > out/y.txt", outputs: [out/y.txt]}}
"""
REUSED = ("b", "c", "g", "w", "x", "y")  # not a, d (the edit reaches them), not f


def _project(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "out").mkdir()
    (root / "src/a.txt").write_text("a 0\n")
    (root / "src/b.txt").write_text("b\n")
    (root / "pipeline.yaml").write_text(textwrap.dedent(PIPELINE))


def _cycle(root: Path, reuse: dict[str, Any]) -> tuple[RunReport, list[Any], dict[str, Any]]:
    """Apply with ``reuse`` (as a watch cycle does); the events reported, the journal's rows."""
    plan = compile_pipeline(root / "pipeline.yaml", {})
    state = State.open(root / ".runner")
    try:
        reporter = RecordingReporter()
        report = apply_plan(plan, state, ApplyOptions(reuse=reuse, jobs=1), reporter)
        conn = state.journal.conn
        rows = {
            "executions": conn.execute(
                "SELECT step_id, element, key, status, output, files, why FROM executions "
                "WHERE run_id=? ORDER BY id",
                (report.run_id,),
            ).fetchall(),
            "events": conn.execute(
                "SELECT type, step_id, element, data FROM events WHERE run_id=? ORDER BY seq",
                (report.run_id,),
            ).fetchall(),
        }
    finally:
        state.close()
    seen = [(e.type, e.step_id, e.element, _plain(e.data)) for e in reporter.events]
    return report, seen, rows


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """An event's data without what differs run to run (its timing)."""
    return {k: v for k, v in data.items() if k != "duration_s"}


def _without_timing(rows: dict[str, Any]) -> dict[str, Any]:
    events = [(t, s, e, _plain(json.loads(d))) for t, s, e, d in rows["events"]]
    return {**rows, "events": events}


def test_reused_steps_answered_in_one_pass_write_what_one_by_one_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    _project(first)
    plan = compile_pipeline(first / "pipeline.yaml", {})
    state = State.open(first / ".runner")
    try:
        last = apply_plan(plan, state, ApplyOptions(jobs=1))
    finally:
        state.close()
    assert {o.status for o in last.steps} == {StepStatus.RAN}
    (first / "src/a.txt").write_text("a 1\n")
    one_by_one = tmp_path / "one_by_one"
    shutil.copytree(first, one_by_one)
    reuse = {o.id: o for o in last.steps if o.id in REUSED}

    asked: list[list[str]] = []
    answer = interpreter_module.Interpreter._answer_reused
    monkeypatch.setattr(
        interpreter_module.Interpreter,
        "_answer_reused",
        lambda self, steps: asked.append([s.id for s in steps]) or answer(self, steps),
    )
    batched, batched_events, batched_rows = _cycle(first, reuse)
    # every owed step, in runs broken where another step is asked for (`f`, then `a`)
    assert sorted(s for run in asked for s in run) == ["b", "c", "x", "y"]
    assert max(map(len, asked)) > 1

    asked.clear()
    monkeypatch.setattr(reusedsteps, "owed", lambda *_args: frozenset())
    single, single_events, single_rows = _cycle(one_by_one, reuse)
    assert asked == []  # (the one-by-one path took them all)

    assert batched_events == single_events
    assert _without_timing(batched_rows) == _without_timing(single_rows)
    assert [(o.id, o.status, o.key, o.output) for o in batched.steps] == [
        (o.id, o.status, o.key, o.output) for o in single.steps
    ]
    statuses = {o.id: o.status.value for o in batched.steps}
    assert statuses == {
        "b": "cached", "c": "cached", "f": "cached", "g": "cached", "w": "cached",
        "x": "cached", "y": "cached", "a": "ran", "d": "ran",
    }  # fmt: skip


def test_only_steps_whose_ancestors_are_all_reused_are_owed(tmp_path: Path) -> None:
    """`g` (below `f`, which is not reused) and `w` (a `when:`) are answered as before."""
    _project(tmp_path)
    plan = compile_pipeline(tmp_path / "pipeline.yaml", {})
    state = State.open(tmp_path / ".runner")
    try:
        last = apply_plan(plan, state, ApplyOptions(jobs=1))
        reuse = {o.id: o for o in last.steps if o.id in REUSED}
        interp = interpreter_module.Interpreter(
            plan,
            journal=state.journal,
            objects=state.objects,
            state_dir=state.dir,
            options=ApplyOptions(reuse=reuse),
        )
        assert reusedsteps.owed(interp.plan, reuse, interp._gates) == {"b", "c", "x", "y"}
    finally:
        state.close()
