"""`plan` writes nothing, even beside a journal an apply killed before its first migration left
(empty, or only a WAL header): it plans as for a new state and leaves the file without a schema
(found by the differential oracle's soak: kill_apply, then plan)."""

from __future__ import annotations

import sqlite3

import pytest

from tests.conftest import Project

PIPE = """\
    runner: 1
    name: unmigrated
    steps:
      say: {uses: template, with: {text: "hello"}}
"""


@pytest.mark.parametrize("left", ["empty", "wal header"])
def test_plan_beside_an_unmigrated_journal_writes_nothing(project: Project, left: str) -> None:
    project.write("pipeline.yaml", PIPE)
    path = project.root / ".runner/journal.db"
    path.parent.mkdir()
    path.touch()
    if left == "wal header":
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    before = path.read_bytes()
    res = project.cli("plan", "pipeline.yaml", "--json", "--state", ".runner")
    assert res.exit_code == 0, res.stderr
    assert [s["action"] for s in res.json["steps"]] == ["run"]
    assert path.read_bytes() == before
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        conn.close()
    assert project.apply("--state", ".runner")["_exit"] == 0  # the apply migrates it
