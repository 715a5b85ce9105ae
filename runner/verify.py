"""`runner verify`: the journal is intact and every object it references is present and whole."""

from __future__ import annotations

import json
from typing import Any

from .store.interrupt import process_alive


def verify_state(state: Any) -> tuple[list[str], int]:
    """Return (problems, number of objects checked)."""
    problems: list[str] = []
    conn = state.journal.conn
    result = conn.execute("PRAGMA integrity_check").fetchone()[0]
    if result != "ok":
        problems.append(f"journal integrity: {result}")
    referenced: dict[str, str] = {}
    for row in conn.execute(
        "SELECT run_id, step_id, element, artifacts, files FROM executions "
        "WHERE status IN ('completed','partial')"
    ):
        run_id, step_id, element, artifacts, files = row
        label = f"run {run_id} step {step_id}" + (
            f"[{element}]" if element not in (None, -1) else ""
        )
        for d in json.loads(artifacts or "[]"):
            referenced.setdefault(d, label)
        for d in (json.loads(files or "{}") or {}).values():
            referenced.setdefault(d, label)
    for table, cols in (("iterations", ("raw", "final")), ("decisions", ("artifact",))):
        try:
            for row in conn.execute(f"SELECT run_id, {', '.join(cols)} FROM {table}"):
                for d in row[1:]:
                    if d:
                        referenced.setdefault(d, f"{table} of run {row[0]}")
        except Exception:  # older journals without the table
            continue
    recorded = state.journal.artifact_digests()
    for digest, label in sorted(referenced.items()):
        if digest not in recorded:
            problems.append(
                f"object {digest[:12]} ({label}) is not recorded in the artifacts table"
            )
        if not state.objects.exists(digest):
            problems.append(f"object {digest[:12]} ({label}) is missing from the store")
        elif not state.objects.verify(digest):
            problems.append(f"object {digest[:12]} ({label}) is corrupt (hash mismatch)")
    for run_id, pid in conn.execute("SELECT id, pid FROM runs WHERE status='running'"):
        if not process_alive(pid):
            problems.append(
                f"run {run_id} is marked running but its process {pid} is gone "
                "(the next apply of its pipeline marks it interrupted)"
            )
    return problems, len(referenced)
