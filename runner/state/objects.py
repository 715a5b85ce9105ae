"""The content-addressed object store: bytes named by their sha256, written atomically.

An object is durable (temp file, fsync, rename, directory fsync) before anyone records it, so a
crash never leaves the journal pointing at half a file. During an apply the fsyncs are grouped:
objects are written and renamed at once, and ``sync()`` makes every pending one durable just
before the journal commits the records that name them (one commit per ~50 ms, not per step).
A group of several is made durable by one syncfs(2) of the store's filesystem where Linux has
it (>= 5.8, which reports writeback errors): each fsync of a new file or directory waits for a
journal commit of its own on ext4, syncfs for one (4-20x less a file on a busy disk; see
bench/bench_store.py).

Nothing damaged is ever served: every read hashes what it hands out, and ``has()`` answers
"present and whole". An object found damaged is set aside under ``.damaged/`` (so the next write
of the same bytes re-creates it rather than skipping it because the name exists). Hashing is
paid once per object and process: a verified object's stat signature (size, mtime, ctime,
inode) is remembered, and objects are never modified in place (written once, read-only), so an
unchanged signature means unchanged bytes; any write to the file changes its mtime and ctime.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import DiskFull, StoreError
from . import lease
from .filedigest import read_small

_CHUNK = 1 << 20
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_DIGEST = re.compile(r"[0-9a-f]{64}")


def is_digest(value: object) -> bool:
    """Whether ``value`` is an object's name (64 lowercase hex): a journal value that is not
    one names no object (damage), and asking the store about it raises StoreError."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None
DAMAGED = ".damaged"  # where damaged objects are set aside (gc deletes them)

Signature = tuple[int, int, int, int]


def signature(st: os.stat_result) -> Signature:
    """What changes whenever a file's bytes do: size, mtime, ctime (not settable), inode."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _damaged_error(digest: str) -> StoreError:
    return StoreError(
        f"object {digest[:12]} is damaged (its bytes no longer hash to its name); it was set "
        f"aside under objects/{DAMAGED}/",
        hint="the next apply re-creates it; if a paid call made it: runner verify --repair",
    )


# Opening an object: never through a symlink, never blocking on a FIFO.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What opening something that is not a readable regular file may answer.
_NOT_A_FILE = (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EACCES, errno.EPERM, errno.ENODEV)


class ObjectStore:
    """Objects live at ``<root>/<aa>/<bbbb...>`` where aabbbb... is the sha256 hex."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root = os.fspath(root)
        self._pending: set[Path] | None = None  # written but not yet fsynced (deferred mode)
        self._lock = threading.Lock()
        # digest -> signature of the file when its bytes last hashed to its name (this process)
        self._trusted: dict[str, Signature] = {}

    def in_use(self) -> contextlib.AbstractContextManager[None]:
        """Held while this process may store or reuse objects: gc deletes nothing meanwhile."""
        return lease.shared(self.root)

    def alone(
        self, *, wait_s: float = 0.0, holders: Callable[[], str] | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Held to delete objects (gc, repair): no apply is using any. Raises Busy."""
        return lease.exclusive(self.root, wait_s=wait_s, holders=holders)

    def defer_sync(self) -> None:
        """From now on, fsync in groups through ``sync()`` (the journal calls it pre-commit)."""
        with self._lock:
            if self._pending is None:
                self._pending = set()

    def stop_deferring(self) -> None:
        self.sync()
        with self._lock:
            self._pending = None

    def sync(self) -> None:
        """Make every object written since the last sync durable (files, then directories; or
        the whole filesystem at once for a group)."""
        with self._lock:
            if not self._pending:
                return
            pending, self._pending = self._pending, set()
        try:
            if len(pending) >= SYNCFS_FROM and _syncfs(self._root):
                return
            for path in pending:
                _fsync_path(path)
            for directory in {p.parent for p in pending}:
                _fsync_path(directory)
        except OSError as exc:
            raise StoreError(f"cannot make objects durable: {exc}") from exc

    def path(self, digest: str) -> Path:
        return Path(self._file(digest))

    def _file(self, digest: str) -> str:
        # A string: pathlib's joins cost more than everything else in has()/size() together.
        if _DIGEST.fullmatch(digest) is None:
            raise StoreError(
                f"not an object digest: {digest!r}",
                # the usual source is a damaged journal record; verify names it, repair mends it
                hint="if the journal holds it: runner verify finds it, runner verify --repair "
                "mends it",
            )
        return f"{self._root}/{digest[:2]}/{digest[2:]}"

    def exists(self, digest: str) -> bool:
        """Whether a file of that name is there (whole or not: see ``has``)."""
        return os.path.isfile(self._file(digest))

    def has(self, digest: str) -> bool:
        """Whether the object is present and whole. A damaged one is set aside (False)."""
        target = self._file(digest)
        st = self._stat(digest, target)
        if st is None:
            return False
        if self._trusted.get(digest) == signature(st):
            return True
        try:
            f = self._open(digest, target)
        except StoreError:
            return False  # damaged: set aside
        if f is None:
            return False
        with f:
            h = hashlib.sha256()
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
            opened = os.fstat(f.fileno())
        if h.hexdigest() == digest:
            self._trusted[digest] = signature(opened)
            return True
        self._set_aside(digest, opened)
        return False

    def verified_signatures(self) -> dict[str, Signature]:
        """The signature of every object this process verified or wrote, as it was then."""
        return dict(self._trusted)

    def trusted_signature(self, digest: str) -> Signature | None:
        """The stat signature of a present, whole object (hashing it unless known already)."""
        return self._trusted.get(digest) if self.has(digest) else None

    def size(self, digest: str) -> int:
        """The object's size in bytes; raises StoreError when it is not in the store."""
        st = self._stat(digest, self._file(digest))
        if st is None:
            raise StoreError(f"object {digest[:12]} is missing from the store")
        return st.st_size

    def put_bytes(self, data: bytes, *, durable: bool = False, recoverable: bool = False) -> str:
        """Store ``data``; returns its digest. With ``durable``, the object is fsynced before this
        returns even while fsyncs are grouped (a worker thread storing what a ledger records at
        once, so the grouped fsync does not land on the event loop). With ``recoverable``, it is
        never fsynced: the caller keeps the bytes elsewhere too (the ledger holds an llm reply's
        text), so an object a power loss damages is found by ``has()`` and made again from
        there at no cost. A damaged object of that name is replaced, never kept because the
        name exists."""
        digest = hashlib.sha256(data).hexdigest()
        target = self._file(digest)
        if self._whole(digest, target, len(data)):
            if durable and not recoverable:
                self._settle(Path(target))
            return digest
        self._write(Path(target), lambda f: f.write(data), durable=durable, synced=not recoverable)
        return digest

    def put_file(self, source: str | os.PathLike[str]) -> str:
        fd = os.open(source, _READ_FLAGS)
        try:
            head, whole = read_small(fd, _CHUNK)
            if whole:  # small (the usual case): hashed and written from what was read
                return self.put_bytes(head)
            h = hashlib.sha256(head)
            size = len(head)
            while chunk := os.read(fd, _CHUNK):
                h.update(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        digest = h.hexdigest()
        target = self.path(digest)
        if not self._whole(digest, str(target), size):

            def copy(out: BinaryIO) -> None:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, out)

            self._write(target, copy)
        return digest

    def _whole(self, digest: str, target: str, size: int) -> bool:
        """Whether an object of ``size`` bytes is already stored whole (a cheap size check
        first: a truncated object is replaced without hashing it)."""
        st = self._stat(digest, target)
        if st is None:
            return False
        if st.st_size != size:
            self._set_aside(digest, st)
            return False
        return self.has(digest)

    def read_bytes(self, digest: str) -> bytes:
        """The object's bytes, checked against its name. Raises StoreError when it is missing
        or damaged (a damaged one is set aside)."""
        f = self._open(digest, self._file(digest))
        if f is None:
            raise StoreError(f"object {digest[:12]} is missing from the store")
        with f:
            data = f.read()
            st = os.fstat(f.fileno())
        if self._trusted.get(digest) != signature(st):
            if hashlib.sha256(data).hexdigest() != digest:
                self._set_aside(digest, st)
                raise _damaged_error(digest)
            self._trusted[digest] = signature(st)
        return data

    def restore(self, digest: str, dest: Path) -> None:
        """Copy an object to ``dest`` atomically (a deleted output file, an export), hashing what
        is copied: a damaged object is set aside and nothing is written. The copy gets the
        usual permissions (0666 less the umask), not the temporary file's 0600.
        Raises StoreError."""
        src = self._open(digest, self._file(digest))
        if src is None:
            raise StoreError(f"object {digest[:12]} is missing from the store")
        with src:
            st = os.fstat(src.fileno())
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
            try:
                h = hashlib.sha256()
                with os.fdopen(fd, "wb") as out:
                    for chunk in iter(lambda: src.read(_CHUNK), b""):
                        h.update(chunk)
                        out.write(chunk)
                if h.hexdigest() != digest:
                    self._set_aside(digest, st)
                    raise _damaged_error(digest)
                os.chmod(tmp, 0o666 & ~_UMASK)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        self._trusted[digest] = signature(st)

    copy_to = restore  # an export: the same verified, atomic copy

    def verify(self, digest: str) -> bool:
        """True when the object exists and its bytes still hash to its name (always hashes;
        changes nothing: `runner verify` reports, only --repair sets damaged objects aside)."""
        try:
            fd = os.open(self._file(digest), _OPEN_FLAGS)
        except OSError:
            return False  # missing, or not a file that can be read: not whole either way
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            h = hashlib.sha256()
            try:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
            except OSError:
                return False
        return h.hexdigest() == digest

    def set_aside(self, digest: str) -> None:
        """Move a damaged object out of the way (kept under .damaged/ for a post-mortem)."""
        try:
            st = os.lstat(self._file(digest))
        except FileNotFoundError:
            return
        self._set_aside(digest, st)

    def _set_aside(self, digest: str, seen: os.stat_result) -> None:
        target = self._file(digest)
        self._trusted.pop(digest, None)
        try:
            # Only the file that was found damaged: another process may have just replaced it
            # with a whole copy (same name), which must stay.
            if os.lstat(target).st_ino != seen.st_ino:
                return
            aside = os.path.join(self._root, DAMAGED)
            os.makedirs(aside, exist_ok=True)
            where = os.path.join(aside, digest)
            if stat.S_ISDIR(seen.st_mode) and os.path.lexists(where):
                where = f"{where}.dir-{seen.st_ino}"  # a directory cannot replace what is there
            os.replace(target, where)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot set damaged object {digest[:12]} aside: {exc}") from exc

    def damaged(self) -> list[Path]:
        """The damaged objects set aside so far."""
        aside = self.root / DAMAGED
        return sorted(aside.iterdir()) if aside.is_dir() else []

    def delete(self, digest: str) -> None:
        self._trusted.pop(digest, None)
        path = self.path(digest)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)  # something put a directory where it was
        else:
            path.unlink(missing_ok=True)

    def _stat(self, digest: str, target: str) -> os.stat_result | None:
        """The object file's stat, or None when it is missing. Anything but a regular file at
        an object's name (a directory, FIFO, symlink...) is damage: set aside, then missing."""
        try:
            st = os.lstat(target)
        except (FileNotFoundError, NotADirectoryError):  # or its fan-out directory is a file
            return None
        if stat.S_ISREG(st.st_mode):
            return st
        self._set_aside(digest, st)
        return None

    def _open(self, digest: str, target: str) -> BinaryIO | None:
        """The object file opened for reading, or None when it is missing. What cannot be
        opened as a regular file (a directory, a FIFO -- opened without blocking --, a symlink,
        an unreadable file) is damage: set aside, then StoreError."""
        try:
            fd = os.open(target, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise StoreError(f"cannot read object {digest[:12]}: {exc.strerror}") from exc
            with contextlib.suppress(FileNotFoundError):
                self._set_aside(digest, os.lstat(target))
            raise _damaged_error(digest) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self._set_aside(digest, st)
            raise _damaged_error(digest)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def iter_digests(self) -> list[str]:
        if not self.root.is_dir():
            return []
        out: list[str] = []
        for sub in self.root.iterdir():
            if sub.is_dir() and len(sub.name) == 2:
                out.extend(sub.name + p.name for p in sub.iterdir() if len(p.name) == 62)
        return out

    def _settle(self, target: Path) -> None:
        """Make an existing object durable now if it is still waiting for the grouped fsync."""
        with self._lock:
            pending = self._pending is not None and target in self._pending
            if pending:
                self._pending.discard(target)  # type: ignore[union-attr]
        if pending:
            try:
                _fsync_path(target)
                _fsync_path(target.parent)
            except OSError as exc:
                raise StoreError(f"cannot make object {target.name[:10]} durable: {exc}") from exc

    def _write(
        self,
        target: Path,
        writer: Callable[[BinaryIO], object],
        *,
        durable: bool = False,
        synced: bool = True,
    ) -> None:
        try:
            try:
                fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            except FileNotFoundError:  # the first object of its fan-out directory
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"cannot write object {target.name[:10]}: {exc}") from exc
            raise StoreError(f"cannot write object {target.name[:10]}: {exc}") from exc
        try:
            deferred = self._pending is not None and not durable
            with os.fdopen(fd, "wb") as out:
                writer(out)
                out.flush()
                if synced and not deferred:
                    os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
            self._trusted[digest_of(target)] = signature(os.stat(target))
            if not synced:
                return
            if deferred:
                with self._lock:
                    if self._pending is not None:
                        self._pending.add(target)
                        return
                _fsync_path(target)  # deferral ended meanwhile
            _fsync_path(target.parent)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"cannot write object {target.name[:10]}: {exc}") from exc
            raise StoreError(f"cannot write object {target.name[:10]}: {exc}") from exc


def digest_of(target: Path) -> str:
    """The digest an object file's path names (``<root>/aa/bbbb...``)."""
    return target.parent.name + target.name


def _read_umask() -> int:
    # Read once, at import (single-threaded): os.umask can only be read by setting it.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


# From how many pending objects one syncfs replaces their fsyncs: it also writes out whatever
# else is waiting on the filesystem (the workspace's copies of the outputs, other programs' files),
# so a lone object keeps its own two fsyncs.
SYNCFS_FROM = 4


def _syncfs(root: str) -> bool:
    """syncfs(2) of the filesystem holding ``root``: every file and directory on it durable.
    False where there is none to be had (not Linux, or a kernel before 5.8, whose syncfs does
    not report a failed writeback); raises OSError when it fails."""
    call = _syncfs_call()
    if call is None:
        return False
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if call(fd) != 0:
            import ctypes

            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    finally:
        os.close(fd)
    return True


@functools.cache
def _syncfs_call() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        major, minor = (int(n) for n in os.uname().release.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < (5, 8):
        return None
    import ctypes  # (~5 ms: imported by the first group, not by every command)

    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int
    result: Callable[[int], int] = call
    return result


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's entry list makes a rename durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
