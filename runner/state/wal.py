"""WAL mode for runner's SQLite files (the journal, the collections)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ..errors import Busy


def wal_mode(conn: sqlite3.Connection, path: Path, wait_s: float = 30.0) -> None:
    """Put the database in WAL mode. Two processes opening a new file at once race to switch
    it, and SQLite answers the loser "database is locked" at once, without its busy timeout
    (the second of two applies started together failed as "damaged"): wait for the winner, as
    for any lock. Raises Busy after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    delay = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise Busy(f"{path} stayed locked for {wait_s:g} s") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
