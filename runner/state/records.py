"""What the journal's records are made of and how a journal file fails: JSON columns (strict JSON
in, a damaged record out as a StoreError), the space kept in reserve for a full disk, and the
errors for a damaged, missing or emptied journal."""

from __future__ import annotations

import errno
import functools
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..errors import DiskFull, StoreError
from .canonical import CanonicalError, compact_json


def now() -> float:
    return time.time()


def dumps(value: Any) -> str:
    """A record's JSON text, strict (a NaN written here would reach `runs show --json` and
    every reader as invalid JSON). Raises CanonicalError (a ValueError) for a number JSON has
    not or a value that holds itself; every value runner records was checked before
    (expressions, data files, provider replies), so this is the last guard, not the place
    that explains."""
    try:
        text = compact_json(value)
    except ValueError as exc:
        raise CanonicalError(f"a value cannot be recorded as JSON: {exc}") from None
    except RecursionError:
        raise CanonicalError(
            "a value cannot be recorded as JSON: it holds itself, or is nested too deeply"
        ) from None
    # SQLite refuses a text over 1e9 bytes with DataError: say so first, in words
    if (
        len(text) > MAX_RECORD_BYTES // 4
        and len(text.encode("utf-8", "replace")) > MAX_RECORD_BYTES
    ):
        raise CanonicalError(
            f"a value of {len(text):,} characters is over the {MAX_RECORD_BYTES:,} bytes "
            "the journal stores in one record"
        )
    return text


MAX_RECORD_BYTES = 1_000_000_000 - 1_000_000  # SQLite's SQLITE_MAX_LENGTH, less a margin


# Columns holding JSON documents (verify checks them with SQLite's json_valid).
JSON_COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("params", "progress"),
    "executions": ("output", "artifacts", "files", "report", "usage", "key_parts"),
    "events": ("data",),
    "calls": ("meta", "result"),
    "iterations": ("compliance", "metadata"),
    "decisions": ("input", "summary"),
    "overrides": ("output",),
}

REPAIR_HINT = "see what is wrong with: runner verify; mend it with: runner verify --repair"


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


# NaN and Infinity were never written (dumps refuses them): read back, they are damage, and
# would fail the next write of the value with a message that names no record.
_DECODER = json.JSONDecoder(parse_constant=_not_json)


def loads(text: str | None, where: str | None = None) -> Any:
    """A JSON column's value. Raises StoreError for a damaged record (never a traceback),
    naming it by ``where`` when the caller knows which it is ("run R params")."""
    if text is None:
        return None
    which = f"the journal holds a damaged record{f' ({where})' if where else ''}"
    try:
        return _DECODER.decode(text)
    except ValueError as exc:
        raise StoreError(f"{which}: bad JSON: {exc}", hint=REPAIR_HINT) from None
    except RecursionError:
        raise StoreError(f"{which}: JSON nested too deeply to read", hint=REPAIR_HINT) from None


# The journal's text is read leniently: a cell whose bytes are not UTF-8 (SQLite stores what it
# is given; damage, or a hand edit) reads with U+FFFD where its bad bytes were, instead of
# failing every command that meets its row. `runner verify` reads the bytes and names such
# cells; `--repair` rewrites them. A C call: no Python frame per cell read.
lenient_text = functools.partial(str, encoding="utf-8", errors="replace")


_DAMAGE = ("malformed", "not a database", "no such table", "no such column", "corrupt")


def is_full(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)


RESERVE = "journal.reserve"
_RESERVE_BYTES = 256 * 1024


def keep_reserve(state_dir: Path) -> None:
    """Keep a small file of space aside: freed when the disk fills, it lets the journal record
    the last batch and the interruption (best effort: a full disk already has none)."""
    path = state_dir / RESERVE
    if path.exists():
        return
    try:
        with open(path, "wb") as f:
            f.truncate(0)
            f.write(b"\0" * _RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)


def release_reserve(state_dir: Path) -> None:
    (state_dir / RESERVE).unlink(missing_ok=True)


def is_damage(exc: Exception) -> bool:
    """Whether an SQLite error means damage (not a lock, a full disk or a bug of ours)."""
    text = str(exc).lower()
    return any(d in text for d in _DAMAGE)


def damaged_journal(path: Path, exc: Exception) -> StoreError:
    """The error for a journal SQLite cannot read (bad pages, not a database, a lost table),
    or DiskFull when what stopped it is a full disk (nothing is damaged: a repair would not
    help, room would)."""
    if disk_full(exc) or out_of_room(path.parent):
        return DiskFull(
            f"the disk holding {path.parent} is full: the journal {path.name} cannot be "
            "opened or created there; nothing ran",
            hint="free some space (or move the project to a bigger disk), then run again",
        )
    return StoreError(f"the journal {path} is damaged: {exc}", hint=REPAIR_HINT)


def disk_full(exc: BaseException) -> bool:
    """Whether an SQLite or OS error says the disk (or the quota) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "disk is full" in str(exc).lower()


_ROOM_PROBE = 1 << 20  # what creating a journal (pages, log, index, reserve) may need at most


def out_of_room(directory: Path) -> bool:
    """Whether ``directory``'s disk (or quota) cannot take another MiB: asked when SQLite
    failed in a way that does not say why ("disk I/O error" from the shared-memory file, a
    write cut short), so a full disk is not called damage. Written and removed, not estimated
    from statvfs: a quota or the root reserve decides as the write does."""
    probe = directory / f".room-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    try:
        os.write(fd, b"\0" * _ROOM_PROBE)  # (a short write on a full disk: the fsync says)
        os.fsync(fd)
        return os.fstat(fd).st_size < _ROOM_PROBE
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def orphaned_objects(state_dir: Path) -> int:
    """How many objects the store holds (0 when it has none): a journal that is missing or
    empty beside them was lost, not new."""
    root = state_dir / "objects"
    try:
        subdirs = [d for d in os.scandir(root) if d.is_dir() and len(d.name) == 2]
    except FileNotFoundError:
        return 0
    return sum(1 for d in subdirs for f in os.scandir(d.path) if len(f.name) == 62)


def lost_journal(path: Path, objects: int) -> StoreError:
    what = "empty (0 bytes)" if path.exists() else "missing"
    return StoreError(
        f"the journal {path} is {what}, but the object store beside it holds {objects} "
        "objects: this is not a new project, and a new journal would forget which paid calls "
        "were made",
        hint="put journal.db back from a backup; or start a new journal that keeps the "
        "objects (the ledger of paid calls is lost): runner verify --repair",
    )
