"""Who may delete objects: applies share the object store, gc (and repair) need it alone.

An apply stores objects and records them a moment later (records are batched), and it reuses
objects that are already there without writing them again. Between the two, nothing in the
journal says the apply needs them, whatever their age. So every process that may store or reuse
objects holds a shared lock on ``objects.lock`` (beside ``objects/``) while it may, and gc
deletes only while holding it exclusively. flock locks belong to the open file and die with the
process: a crashed apply never holds gc off.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import Busy, StoreError

_POLL_S = 0.05


def lock_path(objects_root: Path) -> Path:
    """Beside the store, not in it: nothing that walks the objects meets it."""
    return objects_root.with_name(objects_root.name + ".lock")


def _open(objects_root: Path) -> int:
    try:
        objects_root.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock_path(objects_root), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the object store's lock in {objects_root}: {exc}") from exc


@contextlib.contextmanager
def shared(objects_root: Path) -> Iterator[None]:
    """Hold the store shared: gc deletes nothing meanwhile. Waits while a gc runs (it is
    short: deleting files nothing references)."""
    fd = _open(objects_root)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def exclusive(
    objects_root: Path, *, wait_s: float, holders: Callable[[], str] | None = None
) -> Iterator[None]:
    """Hold the store alone (no apply uses any object). Waits up to ``wait_s`` seconds for
    running applies to end, then raises Busy naming them (``holders`` describes who)."""
    fd = _open(objects_root)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    who = holders() if holders is not None else ""
                    raise Busy(
                        "an apply is using the object store" + (f" ({who})" if who else ""),
                        hint="nothing was deleted; run it again when the apply ends, or let it "
                        "wait: --wait 600",
                    ) from None
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)
