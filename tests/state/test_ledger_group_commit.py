"""The ledger's group commit (Journal.settle): calls that reach the same point together share one
COMMIT, each record is committed (seen by another process) when its writer resumes, and a full
disk met at that commit reaches every writer waiting on it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run.recorder import JournalLedger
from runner.errors import DiskFull
from runner.state.journal import Journal


def _committed(state: Path, key: str) -> str | None:
    with sqlite3.connect(state / "journal.db") as db:
        row = db.execute("SELECT status FROM calls WHERE key=?", (key,)).fetchone()
    return None if row is None else str(row[0])


def test_calls_beginning_together_share_one_commit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal.open(state)
    commits: list[str] = []
    journal.conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    journal.batch_commits()
    ledger = JournalLedger(journal, "run-1", "gen")
    seen: dict[str, str | None] = {}

    async def call(key: str) -> None:
        ledger.begin(key, {"n": key})
        assert _committed(state, key) is None  # written, in the batch, not yet committed
        await ledger.durable()
        seen[key] = _committed(state, key)

    async def together() -> None:
        await asyncio.gather(*(call(f"k{i}") for i in range(6)))

    try:
        asyncio.run(together())
    finally:
        journal.end_batch()
        journal.close()
    assert seen == {f"k{i}": "in_flight" for i in range(6)}
    assert len(commits) == 1


def test_a_full_disk_at_the_group_commit_reaches_every_writer(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "state")
    journal.batch_commits()
    ledger = JournalLedger(journal, "run-1", "gen")

    def full() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    outcomes: list[BaseException | None] = []

    async def call(key: str) -> None:
        ledger.begin(key, {})
        try:
            await ledger.durable()
        except DiskFull as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)

    async def together() -> None:
        journal.before_commit = full  # the commit itself meets the full disk
        await asyncio.gather(*(call(f"k{i}") for i in range(3)))

    try:
        asyncio.run(together())
        assert len(outcomes) == 3 and all(isinstance(o, DiskFull) for o in outcomes)
        with pytest.raises(DiskFull):
            asyncio.run(ledger.durable())
    finally:
        journal.before_commit = None
        journal.close()


FAN_OUT = """\
runner: 1
name: fan
params:
  items: {type: array, default: []}
steps:
  ask:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 16
    cache: false
    with: {prompt: "say ${{ item }}"}
    check:
      - "${{ output.text | length > 0 }}"
"""


def test_an_llm_fan_out_commits_less_often_than_it_has_elements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each element's call is committed before it is sent and once answered, but the elements
    of one moment share those commits: the replies' objects are kept in worker threads and the
    elements resume together, in order (steps/ordered.py). Released one per loop turn they did
    not, and an apply made two commits per element."""
    import json

    from runner.engine.run.apply import apply_file
    from runner.engine.run.options import ApplyOptions

    (tmp_path / "pipeline.yaml").write_text(FAN_OUT, "utf-8")
    (tmp_path / "runner.toml").write_text('[general]\ndefault_provider = "fake"\n', "utf-8")
    commits: list[str] = []
    connect = sqlite3.connect

    def counted(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
        return conn

    monkeypatch.setattr(sqlite3, "connect", counted)
    n = 128
    report = apply_file(
        tmp_path / "pipeline.yaml",
        {"items": json.dumps([f"e{k}" for k in range(n)])},
        state_dir=tmp_path / ".runner",
        options=ApplyOptions(),
    )
    assert report.exit_code == 0, report
    with sqlite3.connect(tmp_path / ".runner" / "journal.db") as db:
        (completed,) = db.execute("SELECT COUNT(*) FROM calls WHERE status='completed'").fetchone()
    assert completed == n
    assert 0 < len(commits) < n, len(commits)


def test_a_batch_timer_outliving_its_batch_and_the_journal_does_nothing(tmp_path: Path) -> None:
    """A batch ended (committed) and its journal closed before the batch's timer fires: the
    timer finds nothing to commit (it raised in the loop's callback, on a closed database)."""
    journal = Journal.open(tmp_path / "state")
    journal.batch_commits(max_age_s=0.02)
    ledger = JournalLedger(journal, "run-1", "gen")
    raised: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: raised.append(ctx))
        ledger.begin("k1", {"n": 1})  # opens a batch, with its timer
        journal.end_batch()
        journal.close()
        await asyncio.sleep(0.1)  # the timer's moment passes

    asyncio.run(main())
    assert raised == []
    assert _committed(tmp_path / "state", "k1") == "in_flight"
