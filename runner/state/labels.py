"""What a run called each for_each element, journaled (the ``labels`` table, migration 12).

A label is worked out as the run expands a for_each (pipeline/labels.py); it is journaled with
the run, so a page or `runs show` of an old run names its elements as the run did, though the
pipeline changed since or is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .journal import Journal

INSERT = "INSERT OR REPLACE INTO labels (run_id, step_id, element, label) VALUES (?,?,?,?)"


def rows_of(run_id: str, labels: Mapping[str, Mapping[Any, str]]) -> list[tuple[Any, ...]]:
    """The ``labels`` rows of run ``run_id``: step id -> element index -> label (an index may be
    JSON text, as a fingerprint keeps it)."""
    return [
        (run_id, step, int(element), label)
        for step, named in labels.items()
        for element, label in named.items()
    ]


def record(journal: Journal, run_id: str, labels: Mapping[str, Mapping[int, str]]) -> None:
    """Journal ``labels`` (step id -> element index -> label) of run ``run_id``; a label given
    again (a resumed run) replaces the one before."""
    rows = rows_of(run_id, labels)
    if rows:
        journal._write()  # as the journal's own writes: inside its batch, replayed on a full disk
        journal._do(lambda: journal.conn.executemany(INSERT, rows))


def of_run(journal: Journal, run_id: str, step: str | None = None) -> dict[str, dict[int, str]]:
    """Step id -> element index -> label, as run ``run_id`` journaled them (of one step)."""
    held = journal.rows_run(run_id)  # a no-op that repeats another's rows has its labels too
    sql, args = "SELECT step_id, element, label FROM labels WHERE run_id=?", [held]
    if step is not None:
        sql, args = sql + " AND step_id=?", [held, step]
    out: dict[str, dict[int, str]] = {}
    for r in journal.query(sql, tuple(args)):
        out.setdefault(r["step_id"], {})[int(r["element"])] = r["label"]
    return out
