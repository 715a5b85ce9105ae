"""One active apply per (pipeline, item): an exclusive flock on ``locks/<name>-<tag>.lock`` in the
state directory, tried without waiting (a second apply is refused, not queued).

flock locks belong to the open file and die with the process: a crashed apply never holds the
next one off. (The same lock the filelock package takes on Unix, without its ~30 ms import.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path


def lock_file(state_dir: Path, pipeline: str, item: str | None) -> Path:
    tag = hashlib.sha256(f"{pipeline}\0{item}".encode()).hexdigest()[:16]
    return state_dir / "locks" / f"{pipeline}-{tag}.lock"


@contextlib.contextmanager
def try_hold(state_dir: Path, pipeline: str, item: str | None) -> Iterator[bool]:
    """Try to hold the item's lock: yields whether it is held; released on exit."""
    path = lock_file(state_dir, pipeline, item)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock
