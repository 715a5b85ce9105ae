"""Marking runs whose process died: one place for the SQL (the journal and the fast path)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

REASON = "interrupted: the process ended without finishing the run"


def mark_interrupted(
    conn: sqlite3.Connection,
    where: str,
    args: tuple[Any, ...],
    *,
    reason: str = REASON,
    status: str = "interrupted",
) -> None:
    """Runs matching ``where`` (a condition on runs) that are still `running` become
    ``status`` (interrupted: stopped by a full disk or a dead process, as the docs say), and
    their running executions interrupted. Runs inside the caller's transaction."""
    conn.execute(
        "UPDATE executions SET status='interrupted' WHERE status='running' AND run_id IN "
        f"(SELECT id FROM runs WHERE status='running' AND {where})",
        args,
    )
    conn.execute(
        f"UPDATE runs SET status=?, reason=? WHERE status='running' AND {where}",
        (status, reason, *args),
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


def mark_cancelled_now(journal_path: Path, run_id: str, reason: str) -> None:
    """Run ``run_id``, if still `running`, becomes cancelled (exit 130) with its running
    executions: from a fresh connection, for a process about to end without its engine's help
    (a signal's watchdog thread). Waits at most a second for the journal's lock."""
    conn = sqlite3.connect(journal_path, timeout=1.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE executions SET status='cancelled' WHERE run_id=? AND status='running'",
            (run_id,),
        )
        conn.execute(
            "UPDATE runs SET status='cancelled', reason=?, exit_code=130, finished_at=? "
            "WHERE id=? AND status='running'",
            (reason, time.time(), run_id),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
