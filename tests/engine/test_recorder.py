"""The recorder (engine/run/recorder.py) over a real journal: the rows and events of a run, in the
order a reader (`runner runs show`, the web page, the next apply) depends on."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run import recorder as recorder_module
from runner.engine.run.events import EventType, RecordingReporter
from runner.engine.run.keys import KeyParts
from runner.engine.run.options import ApplyOptions
from runner.engine.run.outcomes import RunStatus, StepStatus
from runner.engine.run.progress import Progress
from runner.engine.run.recorder import GROUP_S, Recorder
from runner.pipeline.compiler import Plan, compile_pipeline
from runner.state.journal import Journal
from runner.state.records import dumps
from runner.steps.base import StepResult

PIPELINE = """\
runner: 1
name: rec
phases: [draft, final]
steps:
  a:
    uses: hash
    phase: draft
    with: {value: 1}
  b:
    uses: hash
    phase: draft
    with: {value: 2}
  c:
    uses: hash
    phase: final
    with: {value: 3}
"""


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    return compile_pipeline(path)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    journal = Journal.open(tmp_path / ".runner")
    try:
        yield journal
    finally:
        journal.close()


@pytest.fixture
def recorder(plan: Plan, journal: Journal) -> Recorder:
    recorder = Recorder(journal, RecordingReporter(), "run-1", plan.name)
    recorder.run_started(plan, ApplyOptions(item="x"))
    return recorder


def _parts() -> KeyParts:
    return KeyParts("hash", "1", {"value": 1}, {}, {}, None, None, False)


def test_events_reach_the_reporter_at_once_and_the_journal_when_flushed(
    recorder: Recorder, journal: Journal
) -> None:
    reporter = recorder.reporter
    assert isinstance(reporter, RecordingReporter)
    recorder.emit(EventType.STEP_STARTED, "a", None, attempt=1)
    recorder.logger("a", None)("a line of output")
    recorder.emit(EventType.STEP_PASSED, "a", None, duration_s=0.1)
    assert [e.type for e in reporter.events] == [
        EventType.STEP_STARTED,
        EventType.LOG,
        EventType.STEP_PASSED,
    ]
    assert journal.events("run-1") == []
    recorder.flush_events()
    rows = journal.events("run-1")
    # Log lines go to the reporter only; the journal keeps the run's events.
    assert [r["type"] for r in rows] == [EventType.STEP_STARTED.value, EventType.STEP_PASSED.value]
    assert json.loads(rows[0]["data"]) == {"attempt": 1}


def test_a_plain_steps_record_waits_for_its_dependents_an_elements_does_not(
    recorder: Recorder, journal: Journal
) -> None:
    plain = recorder.started("a", -1, "k-a", _parts(), "k-a")
    element = recorder.started("b", 0, "k-b", _parts(), "k-b")
    result = StepResult(output={"n": 1})
    recorder.passed(
        plain,
        result,
        {},
        output_text=dumps(result.output),  # encoded as the body returned it (stepbody.py)
        status="completed",
        attempts=1,
        duration=0.5,
        defer=True,
    )
    recorder.passed(
        element,
        StepResult(output={"n": 2}),
        {},
        output_text='{"n":2}',
        status="completed",
        attempts=1,
        duration=0.5,
        defer=False,
    )
    result.output["n"] = 99  # a later change to the object is not what was returned
    status = {r["step_id"]: r["status"] for r in journal.executions("run-1")}
    assert status == {"a": "running", "b": "completed"}
    recorder.flush_deferred()
    rows = {r["step_id"]: r for r in journal.executions("run-1")}
    assert rows["a"]["status"] == "completed"
    assert json.loads(rows["a"]["output"]) == {"n": 1}
    assert json.loads(rows["a"]["key_parts"]) == _parts().summary()


def test_failed_cancelled_cached_and_refused_executions_are_rows(
    recorder: Recorder, journal: Journal
) -> None:
    failed = recorder.started("a", -1, "k-a", _parts(), None)
    recorder.failed(failed, 3, "timed out after 1s", 3.2, {"partial": True})
    cancelled = recorder.started("b", -1, "k-b", _parts(), None)
    recorder.cancelled(cancelled, 1)
    recorder.reused("c", -1, "k-c", {"n": 3}, "cached; restored out.txt", "k-c")
    recorder.failure("c", 4, None, "input file in.txt does not exist", 0)
    rows = [
        (r["step_id"], r["element"], r["status"], r["attempts"], r["error"], r["why"])
        for r in journal.executions("run-1")
    ]
    assert rows == [
        ("a", -1, "failed", 3, "timed out after 1s", None),
        ("b", -1, "cancelled", 1, "cancelled", None),
        ("c", -1, "cached", 0, None, "cached; restored out.txt"),
        ("c", 4, "failed", 0, "input file in.txt does not exist", None),
    ]


def test_the_finished_run_row_holds_status_exit_code_and_progress(
    plan: Plan, recorder: Recorder, journal: Journal
) -> None:
    progress = Progress(plan)
    progress.mark("a", StepStatus.RAN)
    progress.mark("b", StepStatus.FAILED)
    progress.mark("b", StepStatus.RAN)  # a step is counted once
    recorder.run_finished(
        RunStatus.PARTIAL, 6, None, phase="draft", progress=progress.counts(), started=0.0
    )
    run = journal.query("SELECT * FROM runs WHERE id='run-1'")[0]
    assert (run["status"], run["exit_code"], run["current_phase"], run["item"]) == (
        "partial",
        6,
        "draft",
        "x",
    )
    assert json.loads(run["progress"]) == {
        "draft": {"total": 2, "done": 1, "skipped": 0, "failed": 1, "waiting": 0},
        "final": {"total": 1, "done": 0, "skipped": 0, "failed": 0, "waiting": 0},
    }
    types = [r["type"] for r in journal.events("run-1")]
    assert types == [EventType.RUN_FINISHED.value]


def test_a_cancel_asked_in_the_journal_is_seen(recorder: Recorder, journal: Journal) -> None:
    assert not recorder.cancel_requested()
    journal.update_run("run-1", cancel_requested=1)
    assert recorder.cancel_requested()


def test_a_held_execution_is_written_once_whole_when_it_ends_in_order_with_the_others(
    recorder: Recorder, journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_module, "GROUP_S", 60.0)  # a slow moment writes nothing early
    ran = recorder.started("each", 0, "k-0", _parts(), "k-0", hold=True)
    failed = recorder.started("each", 1, "k-1", _parts(), "k-1", hold=True)
    cancelled = recorder.started("each", 2, "k-2", _parts(), "k-2", hold=True)
    assert min(ran, failed, cancelled) < 0  # stand-ins: nothing is written yet
    assert journal.executions("run-1") == []
    recorder.passed(
        ran,
        StepResult(output={"n": 0}),
        {},
        output_text='{"n":0}',
        status="completed",
        attempts=1,
        duration=0.25,
        defer=False,
    )
    recorder.reused("other", -1, "k-o", {"n": 5}, why="cached")
    recorder.failed(failed, 1, "boom", 0.5, {"partial": True})
    recorder.cancelled(cancelled, 1)
    assert journal.executions("run-1") == []  # held for one statement
    recorder.flush_events()
    rows = journal.executions("run-1")
    assert [(r["step_id"], r["element"], r["status"]) for r in rows] == [
        ("each", 0, "completed"),
        ("other", -1, "cached"),
        ("each", 1, "failed"),
        ("each", 2, "cancelled"),
    ]
    done, _, bad, stopped = rows
    assert json.loads(done["output"]) == {"n": 0}
    assert json.loads(done["key_parts"]) == _parts().summary()
    assert done["started_at"] <= done["finished_at"] and done["duration_s"] == 0.25
    assert (bad["error"], json.loads(bad["output"]), bad["attempts"]) == (
        "boom",
        {"partial": True},
        1,
    )
    assert (stopped["error"], stopped["key"]) == ("cancelled", "k-2")


def test_an_execution_keeping_edits_is_never_held(recorder: Recorder) -> None:
    held = recorder.started("each", 0, "k-0", _parts(), "k-0", hold=True)
    with pytest.raises(ValueError, match="not held"):
        recorder.kept_edits(held, {"out.txt": "ab" * 32})


def test_held_rows_and_events_are_written_once_the_first_is_old(
    recorder: Recorder, journal: Journal
) -> None:
    """Elements that never wait but take their time: what is held goes to the journal every
    GROUP_S, not only every GROUP_ROWS rows, so a reader elsewhere sees the step progress."""
    recorder.flush_events()  # (the group's clock starts now)
    recorder.reused("each", 0, "k-0", {"n": 0}, why="cached")
    recorder.emit(EventType.STEP_SKIPPED, "each", 0)
    assert journal.executions("run-1") == []
    time.sleep(GROUP_S * 1.5)
    recorder.reused("each", 1, "k-1", {"n": 1}, why="cached")
    assert [r["element"] for r in journal.executions("run-1")] == [0, 1]
    assert [r["type"] for r in journal.events("run-1")] == [EventType.STEP_SKIPPED.value]


def _rows_held_then_started(tmp_path: Path, plan: Plan, *, batch: bool) -> list[tuple[Any, ...]]:
    """Cached rows held, an execution started, more held and another started, another
    connection's row between; the executions table as the run leaves it."""
    journal = Journal.open(tmp_path / ("batched" if batch else "plain"))
    try:
        if batch:
            journal.batch_commits()
        recorder = Recorder(journal, RecordingReporter(), "run-1", plan.name)
        recorder.run_started(plan, ApplyOptions(item="x"))
        recorder.reused("a", -1, "k-a", {"n": 1}, why="cached")
        recorder.reused("b", -1, "k-b", {"n": 2}, why="cached")
        first = recorder.started("c", -1, "k-c", _parts(), "k-c")
        if batch:  # its body runs before the held rows are written, under the ids they keep
            assert [r["step_id"] for r in journal.executions("run-1")] == ["c"]
        recorder.reused("a", 0, "k-a0", {"n": 3}, why="cached")
        second = recorder.started("d", -1, "k-d", _parts(), "k-d")
        journal.commit()
        other = sqlite3.connect(tmp_path / ("batched" if batch else "plain") / "journal.db")
        with other:
            other.execute("INSERT INTO executions (run_id, step_id) VALUES ('run-2', 'z')")
        other.close()
        recorder.flush_deferred()
        recorder.flush_events()
        assert (first, second) == (3, 5)
        return journal.conn.execute(
            "SELECT id, run_id, step_id, element, key, status, output FROM executions ORDER BY id"
        ).fetchall()
    finally:
        journal.close()


def test_rows_held_as_an_execution_starts_are_written_after_it_with_the_ids_they_had(
    tmp_path: Path, plan: Plan
) -> None:
    """In a batch (an apply), the rows held when an execution starts are written once its body
    has begun, not on its way: every id is the one writing them first gave (outside a batch,
    as before), whatever another connection wrote meanwhile."""
    rows = _rows_held_then_started(tmp_path, plan, batch=True)
    assert rows == _rows_held_then_started(tmp_path, plan, batch=False)
    assert [(r[0], r[2], r[5]) for r in rows] == [
        (1, "a", "cached"),
        (2, "b", "cached"),
        (3, "c", "running"),
        (4, "a", "cached"),
        (5, "d", "running"),
        (6, "z", None),
    ]
