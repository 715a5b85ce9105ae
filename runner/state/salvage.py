"""Salvaging a damaged journal: every row SQLite can still read goes into a new journal.

Whole tables are copied when they read cleanly; a table with a bad page is read row by row
(by rowid), so one damaged page costs the rows on it, not the table. The damaged file is kept
beside the new one for a post-mortem.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from .migrations import TABLES, migrate

_SCAN_LIMIT = 1_000_000  # rowids tried when even max(rowid) cannot be read


def new_journal(target: Path) -> sqlite3.Connection:
    """A fresh, empty journal at ``target`` (replacing whatever is there)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(target, isolation_level=None)
    migrate(conn)
    return conn


def salvage(source: Path, target: Path) -> dict[str, tuple[int, int]]:
    """Copy every readable row of ``source`` into a new journal at ``target``.

    Returns table -> (rows saved, rows lost); lost is -1 when the table could not be read at
    all (its size unknown).
    """
    new = new_journal(target)
    report: dict[str, tuple[int, int]] = {}
    try:
        old = sqlite3.connect(f"file:{source}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.DatabaseError:
        new.close()
        return {t: (0, -1) for t in TABLES}
    try:
        for table in TABLES:
            report[table] = _copy_table(old, new, table)
    finally:
        old.close()
        new.close()
    return report


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _copy_table(old: sqlite3.Connection, new: sqlite3.Connection, table: str) -> tuple[int, int]:
    try:
        have = set(_columns(old, table))
    except sqlite3.DatabaseError:
        return 0, -1
    cols = [c for c in _columns(new, table) if c in have]
    if not cols:
        return 0, -1  # the table itself is gone
    select = f"SELECT {','.join(cols)} FROM {table}"
    marks = ",".join("?" * len(cols))
    insert = f"INSERT OR IGNORE INTO {table} ({','.join(cols)}) VALUES ({marks})"
    new.execute("BEGIN")
    try:
        try:
            rows = old.execute(select).fetchall()
            new.executemany(insert, rows)
            return len(rows), 0
        except sqlite3.DatabaseError:
            return _copy_rows(old, new, table, select, insert)
    finally:
        new.execute("COMMIT")


def _copy_rows(
    old: sqlite3.Connection, new: sqlite3.Connection, table: str, select: str, insert: str
) -> tuple[int, int]:
    try:
        top = int(old.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0)
    except sqlite3.DatabaseError:
        top = _SCAN_LIMIT
    saved = lost = 0
    misses = 0
    for rowid in range(1, top + 1):
        try:
            row = old.execute(f"{select} WHERE rowid=?", (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            lost += 1
            continue
        if row is None:
            misses += 1
            if top == _SCAN_LIMIT and misses > 10_000:
                break
            continue
        misses = 0
        new.execute(insert, row)
        saved += 1
    return saved, lost


def set_aside(path: Path) -> Path:
    """Rename a damaged journal (and its WAL files) to journal.db.damaged-<time>."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, f"{kept}{suffix}")
    return kept


def put_in_place(new: Path, path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(new, path)
