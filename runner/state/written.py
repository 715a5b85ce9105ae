"""Output files runner wrote whose records `runner gc` deleted: their digests, by path.

gc deletes old runs' executions and the objects nothing references any more, but the files
those runs wrote may still be in the workspace. Without their digests runner could not tell its
own old bytes there from a hand edit, and ``on_edit: fail`` would refuse to write over them
where a fresh apply succeeds (issue 44). A row is a path and a digest: a few bytes an output gc
forgot, whatever its size.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from .objects import is_digest


def outputs_of(files_cells: Iterable[str | None]) -> set[tuple[str, str]]:
    """(path, digest) of every output named by executions' ``files`` cells (JSON objects
    path -> digest); a damaged cell names nothing."""
    out: set[tuple[str, str]] = set()
    for text in files_cells:
        try:
            files = json.loads(text) if text else None
        except (ValueError, RecursionError):
            continue
        if isinstance(files, dict):
            out.update((p, d) for p, d in files.items() if isinstance(p, str) and is_digest(d))
    return out


def remember(conn: sqlite3.Connection, outputs: Iterable[tuple[str, str]], at: float) -> None:
    """Record ``outputs`` (path, digest) as runner's own, inside gc's transaction."""
    conn.executemany(
        "INSERT OR IGNORE INTO forgotten_outputs (path, digest, forgotten_at) VALUES (?, ?, ?)",
        [(path, digest, at) for path, digest in sorted(outputs)],
    )


def runner_wrote(journal: Any, path: str, digest: str) -> bool:
    """Whether runner wrote ``digest`` at ``path`` (relative to the pipeline's root) in a run
    whose records gc deleted since."""
    rows = journal.query(
        "SELECT 1 FROM forgotten_outputs WHERE path=? AND digest=? LIMIT 1", (path, digest)
    )
    return bool(rows)
