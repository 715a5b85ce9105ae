"""Cached results are looked up per (step, key) when asked, with the answer the whole history
gives: the latest completed or partial execution, never a running or failed one, and only the
pipeline's own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.state.journal import CachedResult, Journal


def _execution(
    journal: Journal, pipeline: str, step: str, key: str, status: str, text: str, run: str = "r1"
) -> None:
    journal.start_execution(
        {
            "run_id": run,
            "pipeline": pipeline,
            "step_id": step,
            "element": -1,
            "key": key,
            "status": status,
            "output": f'{{"text": "{text}"}}',
            "artifacts": '["d1"]',
            "files": '{"out/a.txt": "d2"}',
        }
    )


def test_the_latest_usable_execution_answers(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "state")
    _execution(journal, "p", "s", "k1", "completed", "first")
    _execution(journal, "p", "s", "k1", "completed", "forced again")
    _execution(journal, "p", "s", "k1", "failed", "failed later")
    _execution(journal, "p", "s", "k1", "running", "running now")
    _execution(journal, "p", "s", "k2", "partial", "some failed")
    _execution(journal, "other", "s", "k3", "completed", "another pipeline")
    results = journal.cached_results("p")
    hit = results.get(("s", "k1"))
    assert hit is not None and hit.output == {"text": "forced again"}
    assert (hit.key, hit.status, hit.artifacts, hit.files) == (
        "k1",
        "completed",
        ["d1"],
        {"out/a.txt": "d2"},
    )
    partial = results.get(("s", "k2"))
    assert partial is not None and partial.status == "partial"
    assert results.get(("s", "k3")) is None and results.get(("t", "k1")) is None
    journal.close()


def test_the_history_is_not_read_up_front(tmp_path: Path) -> None:
    """Only the results of the keys the pipeline's latest run named are read at once (most of an
    unchanged pipeline's); any other is one indexed query when asked, and every answer (a hit or
    a miss) is remembered for the run, as a snapshot taken at its start would be."""
    journal = Journal.open(tmp_path / "state")
    journal.create_run({"id": "r1", "pipeline": "p", "status": "completed", "created_at": 1.0})
    journal.create_run({"id": "r2", "pipeline": "p", "status": "completed", "created_at": 2.0})
    for n in range(50):
        _execution(journal, "p", "s", f"old{n}", "completed", "history", run="r1")
    _execution(journal, "p", "s", "new", "completed", "latest", run="r2")
    results = journal.cached_results("p")
    assert set(results._rows) == {("s", "new")}  # read, decoded when first asked for
    statements: list[str] = []
    journal.conn.set_trace_callback(statements.append)
    for _ in range(3):
        assert results.get(("s", "new")) is not None
        assert results.get(("s", "old7")) is not None
        assert results.get(("s", "never")) is None
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 2
    plan = sqlite3.connect(journal.path).execute(
        "EXPLAIN QUERY PLAN SELECT output FROM executions WHERE pipeline='p' AND step_id='s' "
        "AND key='k' AND status IN ('completed','partial') ORDER BY id DESC LIMIT 1"
    )
    assert any("USING" in row[3] and "INDEX" in row[3] for row in plan)
    results[("s", "edited")] = CachedResult("edited", {"text": "x"}, [], {}, "completed", "", None)
    assert results.get(("s", "edited")) is not None
    journal.close()
