"""Runs that repeat another run's execution rows: a steady no-op, journaled compactly.

An apply the fingerprint answers (engine/plan/fastpath.py) journals a run whose executions are
all cached, one row per step and element, each naming its key. The next unchanged apply would
write the same rows again (1,000 for a 1,000-step pipeline, each also an entry of the
(pipeline, step, key) index, so the write grew with the journal's history: issue 43). When the
run before it (of the same pipeline and item) holds exactly the rows this one would write, its
run row names that run in ``runs.repeats`` instead, and its rows are that run's, read under its
own id and times. ``repeats`` always names a run that holds rows (never another repeat), and
events are journaled in full as before.

Readers of a run's executions (and labels) ask ``rows_run`` which run holds them
(``Journal.executions`` rewrites them as the run's own); gc moves a deleted run's rows to the
oldest run it keeps that repeats it (``heirs``, ``rehome``).
"""

from __future__ import annotations

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
    except sqlite3.OperationalError:  # a damaged cell: the no-op writes its own rows
        return None
    return held if named == sorted(labels) else None


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
        conn.execute("UPDATE runs SET repeats=NULL WHERE id=?", (heir,))
        conn.execute("UPDATE runs SET repeats=? WHERE repeats=?", (heir, held))
