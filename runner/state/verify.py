"""`runner verify`: the journal is intact and every object it references is present and whole.

Read-only: it reports. `runner verify --repair` (runner/state/repair.py) mends what this finds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

from .cells import bad_cells
from .interrupt import process_alive


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


def referenced(conn: sqlite3.Connection) -> dict[str, str]:
    """Digest -> where the journal relies on it (completed executions, iterations, decisions)."""
    refs: dict[str, str] = {}
    for row in conn.execute(
        "SELECT run_id, step_id, element, artifacts, files FROM executions "
        "WHERE status IN ('completed','partial')"
    ):
        run_id, step_id, element, artifacts, files = row
        label = f"run {run_id} step {step_id}" + (
            f"[{element}]" if element not in (None, -1) else ""
        )
        for d in _json(artifacts, []) or []:
            refs.setdefault(d, label)
        for d in (_json(files, {}) or {}).values():
            refs.setdefault(d, label)
    for row in conn.execute("SELECT run_id, raw, final FROM iterations WHERE status IS NOT 'lost'"):
        for d in row[1:]:
            if d:
                refs.setdefault(d, f"iterations of run {row[0]}")
    for row in conn.execute("SELECT run_id, artifact FROM decisions WHERE artifact IS NOT NULL"):
        refs.setdefault(row[1], f"decisions of run {row[0]}")
    return refs


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
