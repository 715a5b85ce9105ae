"""Runs that repeat another run's execution rows: a steady no-op, journaled compactly.

An apply the fingerprint answers (engine/plan/fastpath.py) journals a run whose executions are
all cached, one row per step and element, each naming its key. The next unchanged apply would
write the same rows again (1,000 for a 1,000-step pipeline, each also an entry of the
(pipeline, step, key) index, so the write grew with the journal's history: issue 43). When the
run before it (of the same pipeline and item) holds exactly the rows this one would write, its
run row names that run in ``runs.repeats`` instead, and its rows are that run's, read under its
own id and times. ``repeats`` always names a run that holds rows (never another repeat). Its
events likewise: it journals its RunStarted and its RunFinished with a gap of seq numbers
between them, one for each StepSkipped of the run it repeats, which are read in that gap as its
own (``events_of``): `runs events --follow` and the page's stream see the same numbers and data.

Readers of a run's executions (and labels, events) ask ``rows_run`` which run holds them
(``Journal.executions``, ``Journal.events`` give them as the run's own); gc moves a deleted
run's rows, labels and StepSkipped events to the oldest run it keeps that repeats it
(``heirs``, ``rehome``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

# The `why` of a cached execution the fingerprint answered (the fast path's rows, the only ones
# another run may repeat).
WHY = "cached (fingerprint unchanged)"
# The journal's version from which runs have a ``repeats`` column (migrations.py).
SINCE = 13

Row = tuple[str, int, "str | None"]  # (step, element or -1, key)


def rows_run(conn: sqlite3.Connection, run_id: str) -> str:
    """The run whose execution rows are ``run_id``'s: the run it repeats, or itself."""
    found = conn.execute("SELECT repeats FROM runs WHERE id=?", (run_id,)).fetchone()
    return str(found[0]) if found is not None and found[0] else run_id


def as_own(rows: list[dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows read from the run ``run`` repeats, as ``run``'s own (its id and times, as the fast
    path writes them: started and finished when the run was)."""
    for row in rows:
        row["run_id"] = run["id"]
        row["started_at"] = run["created_at"]
        row["finished_at"] = run["finished_at"]
    return rows


def repeatable(
    conn: sqlite3.Connection,
    *,
    pipeline: str,
    item: str | None,
    pipeline_file: str,
    params: str,
    rows: Sequence[Row],
    labels: Iterable[tuple[str, int, str]],
) -> str | None:
    """The run whose rows a no-op of ``rows`` (and for_each ``labels``) may repeat: the run of
    ``pipeline`` and ``item`` just before it, when it is a completed no-op of the same file and
    params that the fingerprint answered with exactly these rows (status, key, why, attempts)
    and labels. None: the no-op writes its rows. Call inside the write transaction."""
    if conn.execute("PRAGMA user_version").fetchone()[0] < SINCE:
        return None
    prev = conn.execute(
        # compared here, not read: a damaged cell does not decode (verify names it)
        "SELECT id, repeats, status='completed' AND COALESCE(kind, 'run')='run' "
        "AND params IS ? AND pipeline_file IS ? FROM runs "
        "WHERE pipeline=? AND item IS ? ORDER BY created_at DESC, id DESC LIMIT 1",
        (params, pipeline_file, pipeline, item),
    ).fetchone()
    if prev is None or not prev[2]:
        return None
    held = str(prev[1] or prev[0])
    try:
        journaled = conn.execute(
            "SELECT step_id, element, key, status, why, attempts FROM executions "
            "WHERE run_id=? ORDER BY id",
            (held,),
        )
        same = 0  # read until the first difference (a run that did work differs at once)
        for (s, e, k), row in zip(rows, journaled, strict=False):  # (lengths: below)
            if row != (s, e, k, "cached", WHY, 0):
                return None
            same += 1
        if same != len(rows) or journaled.fetchone() is not None:
            return None
        named = conn.execute(
            "SELECT step_id, element, label FROM labels WHERE run_id=? ORDER BY step_id, element",
            (held,),
        ).fetchall()
        if named != sorted(labels) or not _skips_as(conn, held, rows):
            return None
    except sqlite3.OperationalError:  # a damaged cell: the no-op writes its own rows
        return None
    return held


def skipped(key: str | None) -> str:
    """A cached step's StepSkipped data, as json.dumps({"reason": "cached", "key": key}) writes
    it (spelt out: 0.4 us a row, not 1.8)."""
    return '{"reason": "cached", "key": ' + json.dumps(key) + "}"


def _skips_as(conn: sqlite3.Connection, held: str, rows: Sequence[Row]) -> bool:
    """Whether run ``held``'s events are its start, a StepSkipped of each of ``rows`` in order
    and its end, with consecutive numbers: a repeat reads them as its own (``events_of``)."""
    first, last, count = span(conn, held)
    if first is None or (count, last - first) != (len(rows) + 2, len(rows) + 1):
        return False
    events = conn.execute(
        "SELECT type, step_id, element, data FROM events WHERE run_id=? AND seq>? AND seq<? "
        "ORDER BY seq",
        (held, first, last),
    )
    for (s, e, k), event in zip(rows, events, strict=False):  # (the count is checked above)
        if event != ("StepSkipped", s, None if e < 0 else e, skipped(k)):
            return False
    return True


def span(conn: sqlite3.Connection, run_id: str) -> tuple[Any, Any, int]:
    """(first seq, last seq, count) of a run's events."""
    first, last, count = conn.execute(
        "SELECT MIN(seq), MAX(seq), COUNT(*) FROM events WHERE run_id=?", (run_id,)
    ).fetchone()
    return first, last, int(count)


def events_of(
    conn: sqlite3.Connection, run: str, held: str, after: int, own: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events of ``run``, which repeats ``held``, after seq ``after``: its own (``own``,
    its start and end) and, numbered in the gap it left between them, the StepSkipped events of
    ``held`` as its own (its id and time). A repeat journaled with every event has no gap."""
    first, last, count = span(conn, run)
    if first is None or last - first + 1 == count:
        return own
    ts = conn.execute("SELECT ts FROM events WHERE seq=?", (first,)).fetchone()[0]
    offset = first - span(conn, held)[0]
    cur = conn.execute(
        "SELECT * FROM events WHERE run_id=? AND seq>? AND seq<? ORDER BY seq",
        (held, max(after, first) - offset, last - offset),
    )
    cols = [c[0] for c in cur.description]
    lent = []
    for values in cur:
        event = dict(zip(cols, values, strict=True))
        event.update(seq=event["seq"] + offset, run_id=run, ts=ts)
        lent.append(event)
    return sorted([*own, *lent], key=lambda e: int(e["seq"]))


def heirs(conn: sqlite3.Connection, doomed: set[str]) -> dict[str, str]:
    """Of the runs ``doomed`` (gc deletes them), each whose rows a kept run repeats -> the
    oldest such run: the rows move to it (``rehome``) instead of going with the run."""
    if not doomed or conn.execute("PRAGMA user_version").fetchone()[0] < SINCE:
        return {}
    out: dict[str, str] = {}
    marks = ",".join("?" * len(doomed))
    for rid, held in conn.execute(
        f"SELECT id, repeats FROM runs WHERE repeats IN ({marks}) ORDER BY created_at, id",
        tuple(sorted(doomed)),
    ):
        if rid not in doomed:
            out.setdefault(str(held), str(rid))
    return out


def rehome(conn: sqlite3.Connection, moved: dict[str, str]) -> None:
    """Move each deleted run's rows and labels to its heir (``heirs``), under the heir's id and
    times; the runs that repeated the deleted one repeat the heir. Inside gc's transaction,
    before the deleted runs go."""
    for held, heir in sorted(moved.items()):
        created, finished = conn.execute(
            "SELECT created_at, finished_at FROM runs WHERE id=?", (heir,)
        ).fetchone()
        conn.execute(
            "UPDATE executions SET run_id=?, started_at=?, finished_at=? WHERE run_id=?",
            (heir, created, finished, held),
        )
        conn.execute("UPDATE labels SET run_id=? WHERE run_id=?", (heir, held))
        first, last, count = span(conn, heir)
        if first is not None and last - first + 1 != count:  # its StepSkipped fill its gap
            offset = first - span(conn, held)[0]
            ts = conn.execute("SELECT ts FROM events WHERE seq=?", (first,)).fetchone()[0]
            conn.execute(
                "UPDATE events SET run_id=?, seq=seq+?, ts=? WHERE run_id=? AND seq>? AND seq<?",
                (heir, offset, ts, held, first - offset, last - offset),
            )
        conn.execute("UPDATE runs SET repeats=NULL WHERE id=?", (heir,))
        conn.execute("UPDATE runs SET repeats=? WHERE repeats=?", (heir, held))
