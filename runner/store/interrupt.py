"""Marking runs whose process died: one place for the SQL (the journal and the fast path)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

REASON = "interrupted: the process ended without finishing the run"


def mark_interrupted(
    conn: sqlite3.Connection, where: str, args: tuple[Any, ...], *, reason: str = REASON
) -> None:
    """Runs matching ``where`` (a condition on runs) that are still `running` become failed,
    and their running executions interrupted. Runs inside the caller's transaction."""
    conn.execute(
        "UPDATE executions SET status='interrupted' WHERE status='running' AND run_id IN "
        f"(SELECT id FROM runs WHERE status='running' AND {where})",
        args,
    )
    conn.execute(
        f"UPDATE runs SET status='failed', reason=? WHERE status='running' AND {where}",
        (reason, *args),
    )


def process_alive(pid: int | None) -> bool:
    """Whether a process with this id exists (a run marked running whose process is gone died)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
