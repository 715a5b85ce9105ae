"""`runner verify`: the journal is intact and every object it references is present and whole.

Read-only: it reports. `runner verify --repair` (runner/state/repair.py) mends what this finds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .cells import bad_cells
from .interrupt import process_alive
from .objects import is_digest


def bad_json(conn: sqlite3.Connection) -> Iterator[tuple[str, str, int]]:
    """(table, column, rowid) of every JSON cell a reader cannot take (bad syntax or bytes,
    nested too deep, NaN or Infinity): repair clears them."""
    for cell in bad_cells(conn):
        if cell.mended is None:
            yield cell.table, cell.column, cell.rowid


def _json(text: str | None, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except (ValueError, RecursionError):
        return default  # reported by bad_cells


# What `--repair` writes in a status left NULL (a hand edit, a damaged page): the reading that
# promises least. A run ended somehow (interrupted); an execution's result is not trusted (lost:
# the next apply runs it again); a call may have been sent and billed (maybe_executed: never sent
# again unless asked, the ledger's rule); an iteration is lost; a pending gate asks again
# (superseded); a hand edit no longer applies (superseded).
NULL_STATUS = {
    "runs": "interrupted",
    "executions": "lost",
    "calls": "maybe_executed",
    "iterations": "lost",
    "decisions": "superseded",
    "overrides": "superseded",
}


@dataclass(frozen=True)
class BadRef:
    """A journal value that should name an object but is not a digest (64 lowercase hex)."""

    table: str
    rowid: int
    column: str
    value: Any
    label: str

    def line(self) -> str:
        shown = json.dumps(self.value, ensure_ascii=True)[:80]
        return (
            f"journal record {self.table} #{self.rowid} ({self.label}): {self.column} holds "
            f"{shown}, not an object digest"
        )


def _executions(conn: sqlite3.Connection) -> Iterator[tuple[int, str, list[Any], list[Any]]]:
    """(rowid, label, artifact values, file digest values) of each completed execution."""
    for row in conn.execute(
        "SELECT rowid, run_id, step_id, element, artifacts, files FROM executions "
        "WHERE status IN ('completed','partial')"
    ):
        rowid, run_id, step_id, element, artifacts, files = row
        label = f"run {run_id} step {step_id}" + (
            f"[{element}]" if element not in (None, -1) else ""
        )
        listed = _json(artifacts, None) or []  # a JSON null relies on nothing, as none does
        named = _json(files, None) or {}
        yield (
            rowid,
            label,
            listed if isinstance(listed, list) else [listed],
            list(named.values()) if isinstance(named, dict) else [named],
        )


def referenced(conn: sqlite3.Connection) -> dict[str, str]:
    """Digest -> where the journal relies on it (completed executions, iterations, decisions).
    A value that is not a digest names no object: ``bad_refs`` reports it."""
    refs: dict[str, str] = {}
    for _, label, artifacts, files in _executions(conn):
        for d in (*artifacts, *files):
            if is_digest(d):
                refs.setdefault(d, label)
    for row in conn.execute("SELECT run_id, raw, final FROM iterations WHERE status IS NOT 'lost'"):
        for d in row[1:]:
            if is_digest(d):
                refs.setdefault(d, f"iterations of run {row[0]}")
    for row in conn.execute("SELECT run_id, artifact FROM decisions WHERE artifact IS NOT NULL"):
        if is_digest(row[1]):
            refs.setdefault(row[1], f"decisions of run {row[0]}")
    return refs


def bad_refs(conn: sqlite3.Connection) -> Iterator[BadRef]:
    """Every value the journal holds where an object's digest belongs that is not one: an apply
    restoring it, and verify looking it up, would stop at it. Repair stops relying on each (the
    execution or iteration is lost, the decision's artifact or the artifacts row dropped)."""
    for rowid, label, artifacts, files in _executions(conn):
        for column, values in (("artifacts", artifacts), ("files", files)):
            for value in values:
                if not is_digest(value):
                    yield BadRef("executions", rowid, column, value, label)
    for rowid, run_id, raw, final in conn.execute(
        "SELECT rowid, run_id, raw, final FROM iterations WHERE status IS NOT 'lost'"
    ):
        for column, value in (("raw", raw), ("final", final)):
            if value is not None and not is_digest(value):
                yield BadRef("iterations", rowid, column, value, f"iterations of run {run_id}")
    for rowid, run_id, value in conn.execute(
        "SELECT rowid, run_id, artifact FROM decisions WHERE artifact IS NOT NULL"
    ):
        if not is_digest(value):
            yield BadRef("decisions", rowid, "artifact", value, f"decisions of run {run_id}")
    for rowid, value in conn.execute("SELECT rowid, digest FROM artifacts"):
        if not is_digest(value):
            yield BadRef("artifacts", rowid, "digest", value, "the artifacts table")


def null_statuses(conn: sqlite3.Connection) -> Iterator[tuple[str, int]]:
    """(table, rowid) of every row whose status is NULL (every reader takes a status as given)."""
    for table in NULL_STATUS:
        for (rowid,) in conn.execute(f'SELECT rowid FROM "{table}" WHERE status IS NULL'):
            yield table, int(rowid)


def _run_folders(state: Any) -> list[str]:
    """Finals in a run's folder edited by hand (they are read-only views of the store)."""
    from ..source.termtext import shown_path
    from .runfolder import edited

    runs_dir = state.dir / "runs"
    if not runs_dir.is_dir():
        return []
    out = []
    ids = {r[0] for r in state.journal.conn.execute("SELECT DISTINCT run_id FROM iterations")}
    for run_id in sorted(ids):
        if not (runs_dir / run_id).is_dir():
            continue
        for path in edited(state, run_id):
            out.append(
                f"{shown_path(path)} was edited by hand: it no longer holds the final the run "
                "recorded (the store keeps the original; export and show use it; delete the "
                f"file and `runner show {run_id}` puts the original back)"
            )
    return out


def verify_state(state: Any) -> tuple[list[str], int]:
    """Return (problems, number of objects checked)."""
    problems: list[str] = []
    conn = state.journal.conn
    result = conn.execute("PRAGMA integrity_check").fetchone()[0]
    if result != "ok":
        problems.append(f"journal integrity: {result}")
    # every stored text and JSON value, read as its bytes: what a command would choke on
    problems += [cell.line() for cell in bad_cells(conn)]
    problems += [bad.line() for bad in bad_refs(conn)]
    problems += [
        f"journal record {table} #{rowid}: status is NULL" for table, rowid in null_statuses(conn)
    ]
    refs = referenced(conn)
    recorded = state.journal.artifact_digests()
    for digest, label in sorted(refs.items()):
        if digest not in recorded:
            problems.append(
                f"object {digest[:12]} ({label}) is not recorded in the artifacts table"
            )
        if not state.objects.exists(digest):
            problems.append(f"object {digest[:12]} ({label}) is missing from the store")
        elif not state.objects.verify(digest):
            problems.append(f"object {digest[:12]} ({label}) is corrupt (hash mismatch)")
    problems += _run_folders(state)
    running = "SELECT id, pid, pipeline, item FROM runs WHERE status='running'"
    for run_id, pid, pipeline, item in conn.execute(running):
        if not process_alive(pid):
            # only an apply holding that item's lock may decide the run is dead (another
            # item's apply may run beside a live one)
            of = f"pipeline '{pipeline}'" + ("" if item is None else f" item '{item}'")
            problems.append(
                f"run {run_id} is marked running but its process {pid} is gone "
                f"(the next apply of {of} marks it interrupted)"
            )
    return problems, len(refs)
