"""A steady no-op journals its run compactly (state/repeats.py, issue 43): when the no-op before
it wrote the very rows it would write, its run names that run instead, and every reader (runs
show, latest, events, runs list, gc, plan) answers as it did when each no-op wrote its rows."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from runner.state import repeats
from runner.state.journal import RUN_COLUMNS
from runner.state.migrations import migrate
from tests.conftest import Project, ran
from tests.engine.test_fastpath import age_files, converge, fast

PIPELINE = """\
    runner: 1
    name: noted
    params:
      word: {type: string, default: one}
    steps:
      note:
        uses: shell
        with: {run: "cat in.txt > out.txt", inputs: [in.txt], outputs: [out.txt]}
      say:
        uses: template
        for_each: "${{ ['a', 'b'] }}"
        with: {text: "${{ item }} ${{ params.word }}"}
"""


def _runs(project: Project) -> dict[str, tuple[str | None, int]]:
    """Run id -> (the run it repeats, its own execution rows)."""
    with sqlite3.connect(project.root / ".runner" / "journal.db") as conn:
        return {
            rid: (held, n)
            for rid, held, n in conn.execute(
                "SELECT id, repeats, (SELECT COUNT(*) FROM executions e WHERE e.run_id=runs.id) "
                "FROM runs"
            )
        }


def _shown(project: Project, run_id: str) -> dict[str, Any]:
    doc = project.cli("runs", "show", run_id, "--json").json
    for key in ("id", "created_at", "finished_at", "pid", "repeat_of"):
        doc["run"].pop(key)
    return dict(doc)


def _events(project: Project, run_id: str) -> list[dict[str, Any]]:
    res = project.cli("runs", "events", run_id)
    assert res.exit_code == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    for e in events:
        for key in ("seq", "run_id", "ts"):
            e.pop(key)
    return events


def _setup(project: Project) -> dict[str, Any]:
    project.write("pipeline.yaml", PIPELINE)
    project.write("in.txt", "first\n")
    return converge(project)


def test_a_no_op_after_a_no_op_names_its_rows(project: Project) -> None:
    _setup(project)
    noops = [project.apply() for _ in range(3)]
    assert all(fast(doc, project) for doc in noops)
    first, second, third = (doc["run"]["id"] for doc in noops)
    runs = _runs(project)
    assert runs[first] == (None, 3)  # the first no-op writes its rows
    assert runs[second] == (first, 0)
    assert runs[third] == (first, 0)  # the run that holds them, never another repeat
    # apply --json, runs show (executions, labels, outputs), events: as the first's
    strip = {"run": None}
    assert [{**d, **strip, "_stderr": ""} for d in noops[1:]] == [
        {**noops[0], **strip, "_stderr": ""}
    ] * 2
    assert _shown(project, third) == _shown(project, first)
    assert _shown(project, "latest") == _shown(project, first)
    shown = project.cli("runs", "show", third, "--json").json
    assert {e["label"] for e in shown["executions"]} == {None, "a", "b"}
    assert _events(project, third) == _events(project, first)
    from runner.state.journal import Journal

    with Journal.open(project.root / ".runner", readonly=True) as journal:
        own = journal.query("SELECT seq, type FROM events WHERE run_id=?", (third,))
        assert [e["type"] for e in own] == ["RunStarted", "RunFinished"]  # the rest: lent
        every = journal.events(third)
        assert [e["seq"] for e in every] == list(range(own[0]["seq"], own[1]["seq"] + 1))
        assert {(e["run_id"], e["ts"]) for e in every} == {(third, every[0]["ts"])}
        for cursor in (every[0]["seq"], every[2]["seq"], every[-2]["seq"], every[-1]["seq"]):
            assert journal.events(third, cursor) == [e for e in every if e["seq"] > cursor]
    # runs list folds them as before: each repeats the run just before it
    listed = {r["id"]: r["repeat_of"] for r in project.cli("runs", "list", "--json").json["runs"]}
    assert (listed[second], listed[third]) == (first, second)
    assert "repeats" not in shown["run"]  # where the rows are is the journal's own business
    # a run of the same pipeline between two no-ops (other params) is not repeated across
    other = project.apply("-p", "word=two")["run"]["id"]
    again = project.apply()["run"]["id"]
    runs = _runs(project)
    assert runs[other][0] is None and runs[again] == (None, 3)
    last = project.apply()["run"]["id"]
    assert _runs(project)[last] == (again, 0)


def test_an_input_edit_after_repeats_runs_and_is_repeated_afresh(project: Project) -> None:
    _setup(project)
    first = project.apply()["run"]["id"]
    project.apply()
    project.write("in.txt", "second\n")
    changed = project.apply()
    assert ran(changed) == {"note"}
    age_files(project.root)
    project.apply()  # records the fingerprint
    noop = project.apply()["run"]["id"]
    repeat = project.apply()["run"]["id"]
    runs = _runs(project)
    assert runs[repeat] == (noop, 0) and runs[noop][0] is None and noop != first
    outputs = [
        e["output"] for e in project.cli("runs", "show", repeat, "--json").json["executions"]
    ]
    assert {"exit_code": 0, "files": outputs[0]["files"], "stderr": "", "stdout": ""} == outputs[0]
    assert (project.root / "out.txt").read_text() == "second\n"


@pytest.mark.parametrize("keep", [1, 2])
def test_gc_moves_the_rows_a_kept_repeat_names(project: Project, keep: int) -> None:
    _setup(project)
    held, *repeats = [project.apply()["run"]["id"] for _ in range(3)]
    before = _shown(project, repeats[-1])
    events = [_events(project, r) for r in repeats]
    res = project.cli("gc", "--keep-last", str(keep), "--state", ".runner", "--json")
    assert res.exit_code == 0, res.stderr
    runs = _runs(project)
    assert held not in runs
    kept = repeats[-keep:]
    assert runs[kept[0]] == (None, 3)  # the oldest kept repeat holds the rows now
    assert all(runs[r] == (kept[0], 0) for r in kept[1:])
    assert _shown(project, repeats[-1]) == before
    assert [_events(project, r) for r in kept] == events[-keep:]
    assert '"would_change": false' in project.cli("plan", "pipeline.yaml", "--json").stdout
    doc = project.apply()
    assert ran(doc) == set()  # (gc forgets fingerprints: the full path answers)


def test_run_columns_are_every_column_but_repeats(project: Project) -> None:
    _setup(project)
    with sqlite3.connect(project.root / ".runner" / "journal.db") as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert RUN_COLUMNS.split(", ") == [c for c in columns if c != "repeats"]


def test_racily_clean_files_are_hashed_until_a_check_settles_them(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fingerprint recorded moments after its outputs were written checks their content on
    each no-op; a no-op past the racy window that finds them whole records so, and the next one
    stats them only. A same-size rewrite that keeps the mtime is still seen (its ctime moved)."""
    from runner.engine.plan import fastpath

    monkeypatch.setattr(fastpath, "_RACY_NS", 300_000_000)
    project.write("pipeline.yaml", PIPELINE)
    project.write("in.txt", "first\n")
    project.apply()
    assert fast(project.apply(), project)  # the outputs are racily clean: hashed
    hashed: list[str] = []
    real_sha = fastpath._sha256

    def counted(path: str) -> str | None:
        hashed.append(path)
        return real_sha(path)

    monkeypatch.setattr(fastpath, "_sha256", counted)
    time.sleep(0.35)
    assert fast(project.apply(), project)  # hashes them, then settles them
    assert hashed
    hashed.clear()
    assert fast(project.apply(), project)
    assert hashed == []
    path = project.root / "in.txt"
    st = path.stat()
    path.write_text("FIRST\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"note"}
    assert (project.root / "out.txt").read_text() == "FIRST\n"


def test_a_journal_older_than_repeats_gets_every_row(project: Project, tmp_path: Path) -> None:
    """A no-op on a journal of migration 12 (the fingerprint's fast path does not migrate)
    writes its rows as before."""
    _setup(project)
    project.apply()
    db = sqlite3.connect(project.root / ".runner" / "journal.db", isolation_level=None)
    try:
        db.execute("PRAGMA user_version=12")
    finally:
        db.close()
    from runner.engine.plan import fastpath, noopjournal

    state = project.root / ".runner"
    pipeline = (project.root / "pipeline.yaml").resolve()
    held = fastpath.check(state, pipeline, {}, None)
    assert held is not None
    noop = noopjournal.journal(state, pipeline, held)
    assert noop is not None
    assert _runs(project)[noop["run"]["id"]] == (None, 3)


def _journal_with(
    rows: list[tuple[str, int, str]], *, why: str = repeats.WHY
) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute(
        "INSERT INTO runs (id, pipeline, pipeline_file, item, status, kind, params, created_at) "
        "VALUES ('r1', 'p', '/p.yaml', NULL, 'completed', 'run', '{}', 1.0)"
    )
    conn.executemany(
        "INSERT INTO executions (run_id, step_id, element, key, status, attempts, why) "
        "VALUES ('r1', ?, ?, ?, 'cached', 0, ?)",
        [(*row, why) for row in rows],
    )
    conn.execute("INSERT INTO labels VALUES ('r1', 'b', 0, 'x')")
    conn.executemany(
        "INSERT INTO events (run_id, ts, type, step_id, element, data) VALUES ('r1', 1.0, ?,?,?,?)",
        [
            ("RunStarted", None, None, "{}"),
            *[("StepSkipped", s, None if e < 0 else e, repeats.skipped(k)) for s, e, k in rows],
            ("RunFinished", None, None, "{}"),
        ],
    )
    return conn


def test_only_exactly_the_same_rows_are_repeated() -> None:
    rows = [("a", -1, "k1"), ("b", 0, "k2")]
    labels = [("b", 0, "x")]

    def held(conn: sqlite3.Connection, **changed: Any) -> str | None:
        ask = {
            "pipeline": "p",
            "item": None,
            "pipeline_file": "/p.yaml",
            "params": "{}",
            "rows": rows,
            "labels": labels,
        }
        return repeats.repeatable(conn, **{**ask, **changed})

    same = _journal_with(rows)
    assert held(same) == "r1"
    assert held(same, rows=rows[:1]) is None  # the run before has a row more
    assert held(same, rows=[*rows, ("c", -1, "k3")]) is None  # ... or one less
    assert held(same, rows=[rows[0], ("b", 0, "other")]) is None
    assert held(same, labels=[("b", 0, "y")]) is None
    assert held(same, params='{"n": 1}') is None
    assert held(same, pipeline_file="/q.yaml") is None
    assert held(same, item="i") is None  # not the run before it: none
    assert held(_journal_with(rows, why="cached")) is None  # the full path's rows: not repeated
    same.execute("UPDATE events SET data='{}' WHERE step_id='b'")  # its events are not as
    assert held(same) is None  # a repeat would read them
    same.execute("DELETE FROM events WHERE step_id='b'")
    assert held(same, rows=rows[:1]) is None
    same = _journal_with(rows)
    same.execute("UPDATE runs SET status='failed'")
    assert held(same) is None


def test_an_edit_starts_from_a_repeats_rows(project: Project) -> None:
    """`runner edit RUN` of a repeat (the id its apply printed) starts from the row it names,
    as the run's own."""
    from runner.state.journal import Journal
    from runner.state.overrides import execution_for

    _setup(project)
    held, repeat = (project.apply()["run"]["id"] for _ in range(2))
    assert _runs(project)[repeat] == (held, 0)
    with Journal.open(project.root / ".runner", readonly=True) as journal:
        mine = execution_for(journal, repeat, "say", 1)
        theirs = execution_for(journal, held, "say", 1)
    assert mine["run"]["id"] == repeat
    assert mine["execution"]["run_id"] == repeat
    for key in ("run_id", "started_at", "finished_at"):
        mine["execution"].pop(key), theirs["execution"].pop(key)
    assert mine["execution"] == theirs["execution"]
    assert json.loads(mine["execution"]["output"])["text"] == "b one"
