"""The content-addressed object store: bytes named by their sha256, written atomically.

An object is durable (temp file, fsync, rename, directory fsync) before anyone records it, so a
crash never leaves the journal pointing at half a file. During an apply the fsyncs are grouped:
objects are written and renamed at once, and ``sync()`` makes every pending one durable just
before the journal commits the records that name them (one commit per ~50 ms, not per step).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import StoreError

_CHUNK = 1 << 20
_DIGEST = re.compile(r"[0-9a-f]{64}")


class ObjectStore:
    """Objects live at ``<root>/<aa>/<bbbb...>`` where aabbbb... is the sha256 hex."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root = os.fspath(root)
        self._pending: set[Path] | None = None  # written but not yet fsynced (deferred mode)
        self._lock = threading.Lock()

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
        """Make every object written since the last sync durable (files, then directories)."""
        with self._lock:
            if not self._pending:
                return
            pending, self._pending = self._pending, set()
        try:
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
            raise StoreError(f"not an object digest: {digest!r}")
        return f"{self._root}/{digest[:2]}/{digest[2:]}"

    def has(self, digest: str) -> bool:
        return os.path.isfile(self._file(digest))

    def size(self, digest: str) -> int:
        """The object's size in bytes; raises StoreError when it is not in the store."""
        try:
            return os.stat(self._file(digest)).st_size
        except FileNotFoundError:
            raise StoreError(f"object {digest[:12]} is missing from the store") from None

    def put_bytes(self, data: bytes, *, durable: bool = False) -> str:
        """Store ``data``; returns its digest. With ``durable``, the object is fsynced before this
        returns even while fsyncs are grouped (a worker thread storing what a ledger records at
        once, so the grouped fsync does not land on the event loop)."""
        digest = hashlib.sha256(data).hexdigest()
        target = self._file(digest)
        if os.path.isfile(target):
            if durable:
                self._settle(Path(target))
            return digest
        self._write(Path(target), lambda f: f.write(data), durable=durable)
        return digest

    def put_file(self, source: Path) -> str:
        with open(source, "rb") as f:
            head = f.read(_CHUNK)
            if len(head) < _CHUNK:  # small (the usual case): hashed and written from one read
                return self.put_bytes(head)
            h = hashlib.sha256(head)
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
        digest = h.hexdigest()
        target = self.path(digest)
        if not os.path.isfile(target):

            def copy(out: BinaryIO) -> None:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, out)

            self._write(target, copy)
        return digest

    def read_bytes(self, digest: str) -> bytes:
        try:
            return self.path(digest).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"object {digest[:12]} is missing from the store") from None

    def restore(self, digest: str, dest: Path) -> None:
        """Copy an object to ``dest`` atomically (used to bring back a deleted output file)."""
        src = self.path(digest)
        if not src.is_file():
            raise StoreError(f"object {digest[:12]} is missing from the store")
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
                shutil.copyfileobj(f, out)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def verify(self, digest: str) -> bool:
        """True when the object exists and its bytes still hash to its name."""
        p = self.path(digest)
        if not p.is_file():
            return False
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
        return h.hexdigest() == digest

    def delete(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

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
        self, target: Path, writer: Callable[[BinaryIO], object], *, durable: bool = False
    ) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except FileNotFoundError:  # the first object of its fan-out directory
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            deferred = self._pending is not None and not durable
            with os.fdopen(fd, "wb") as out:
                writer(out)
                out.flush()
                if not deferred:
                    os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
            if deferred:
                with self._lock:
                    if self._pending is not None:
                        self._pending.add(target)
                        return
                _fsync_path(target)  # deferral ended meanwhile
            _fsync_path(target.parent)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"cannot write object {target.name[:10]}: {exc}") from exc


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's entry list makes a rename durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
