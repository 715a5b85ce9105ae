"""A fresh journal is created from the schema snapshot; the snapshot is what the migrations build."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.state import _schema, snapshot
from runner.state.journal import Journal
from runner.state.migrations import MIGRATIONS, migrate


def test_the_snapshot_is_what_the_migrations_build() -> None:
    version, statements = snapshot.built_by_migrations()
    assert (_schema.VERSION, list(_schema.STATEMENTS)) == (version, statements), (
        "runner/state/_schema.py is out of date: run `python -m runner.state.snapshot`"
    )
    assert snapshot.render() == snapshot.TARGET.read_text()


def test_a_fresh_journal_from_the_snapshot_equals_a_migrated_one(tmp_path: Path) -> None:
    fresh = Journal.open(tmp_path / "a")
    replayed = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    migrate(replayed, snapshot=False)
    try:
        assert snapshot.schema_of(fresh.conn) == snapshot.schema_of(replayed)
        for conn in (fresh.conn, replayed):
            assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        # and it works: a run and an execution go in and come back
        fresh.create_run({"id": "r1", "pipeline": "p", "status": "running", "created_at": 0.0})
        fresh.start_execution({"run_id": "r1", "step_id": "s", "element": -1, "key": "k"})
        assert [e["step_id"] for e in fresh.executions("r1")] == ["s"]
    finally:
        fresh.close()
        replayed.close()


def test_an_old_journal_is_migrated_forward(tmp_path: Path) -> None:
    """A journal made by an earlier release (version 3 here) gains exactly what it lacks."""
    import sqlite_utils

    path = tmp_path / "journal.db"
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn, execute_plugins=False)
    for m in MIGRATIONS[:3]:
        m(db)
    conn.execute("PRAGMA user_version=3")
    conn.execute("INSERT INTO runs (id, pipeline, status) VALUES ('old', 'p', 'completed')")
    conn.close()
    journal = Journal.open(tmp_path)
    try:
        assert journal.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert snapshot.schema_of(journal.conn) == list(_schema.STATEMENTS)
        assert journal.get_run("old")["status"] == "completed"
    finally:
        journal.close()
