"""Content hashes of workspace files, cached by (size, mtime, ctime, inode) in the journal.

Touching a file changes its mtime: it is re-hashed, its content hash is unchanged, so nothing
downstream re-runs. ctime is in the signature because mtime can be set back: a file rewritten in
place with the same size and its old mtime (`cp -p`, `rsync -t --inplace`, an archive with fixed
mtimes) keeps (size, mtime, inode), but every write or utime moves its ctime, which no one can
set.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from pathlib import Path

from ...source.beneath import open_beneath
from ...state.filedigest import sha256_fd, sha256_file
from ...state.journal import Journal

_RACY_NS = 2_000_000_000
# Within one run a digest is trusted sooner on a file system whose times carry fractions of a
# second: their clock ticks every 1-10 ms (the kernel's coarse clock at HZ=100, exFAT's
# 10 ms units), so a write after a look this far behind its last change moves its ctime. A
# file is hashed again only until then (a fan-out's 998 leaves, their keys worked out in one
# burst as their root ends, hashed its fresh output 998 times).
_RACY_FINE_NS = 20_000_000

Signature = tuple[int, int, int, int]  # (size, mtime_ns, ctime_ns, inode)


def signature(st: os.stat_result) -> Signature:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _fine_times(st: os.stat_result) -> bool:
    """Whether the file system keeps fractions of a second in this file's times (both: FAT's
    ctime is its creation time, in 10 ms units, beside a modification time in 2 s ones)."""
    return bool(st.st_mtime_ns % 1_000_000_000 and st.st_ctime_ns % 1_000_000_000)


def _sha256_beneath(root: Path, path: Path) -> str:
    fd = open_beneath(root, path.relative_to(root).as_posix(), real_root=_real_root(root))
    try:
        return sha256_fd(fd)  # (a file object's buffer cost more than a small file's hash)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=64)
def _real_root(root: Path) -> str:
    # The project root itself is not what a step swaps (its inputs' directories are): one walk
    # of it per process, not one per input file hashed.
    return os.path.realpath(root)


class FileHasher:
    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal
        self.known = journal.file_hashes() if journal is not None else {}
        self.dirty: list[tuple[str, int, int, int, int, str]] = []
        # every file hashed in this run: (size, mtime_ns, ctime_ns, inode, sha256)
        self.used: dict[str, tuple[int, int, int, int, str]] = {}
        # digests settled within this run only (see _RACY_FINE_NS), never journaled
        self.settled: dict[str, tuple[int, int, int, int, str]] = {}

    def hash(self, path: Path | str, *, root: Path | None = None, used: bool = True) -> str:
        """sha256 of the file at ``path``; raises FileNotFoundError when it is missing. With
        ``root`` (``path`` lies beneath it), the bytes hashed are those of the file as opened
        now, refused (source.beneath.OutsideRoot, NotRegularFile: OSErrors) when a directory
        on its path became a symlink pointing out since the pipeline compiled. ``used=False``:
        a look at bytes about to be rewritten, which no key or fingerprint depends on (their
        signature would be stale by the time the run's fingerprint is recorded)."""
        began = time.time_ns()  # (before the stat: a write after it moves the ctime past)
        return self._hash(path, os.stat(path), began, root, used)

    def hash_regular(self, path: str, *, used: bool = True) -> tuple[str, bool]:
        """``hash(path, used=used)``, and whether ``path`` is a regular file itself, not a
        symlink (watch's check that an output is still below the root): an lstat, which for
        a regular file is the stat ``hash`` takes, so the answer costs no system call more."""
        began = time.time_ns()
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return self._hash(path, st, began, None, used), True
        return self._hash(path, os.stat(path), began, None, used), False

    def _hash(
        self, path: Path | str, st: os.stat_result, began: int, root: Path | None, used: bool
    ) -> str:
        key = str(path)
        sig = signature(st)
        cached = self.known.get(key)
        if cached is None or cached[:4] != sig:
            cached = self.settled.get(key)
        if cached is not None and cached[:4] == sig:
            if used:
                self.used[key] = (*sig, cached[4])
            return cached[4]
        digest = sha256_file(path) if root is None else _sha256_beneath(root, Path(path))
        if used:
            self.used[key] = (*sig, digest)
        # A file modified within the clock's granularity of now could change again without its
        # signature changing ("racily clean"): only trust signatures that are old enough. By
        # ctime, as every change moves it (an mtime may have been set back to long ago). The
        # journal keeps those older than any file system's granularity; this run also those
        # older than the granularity of the file's own (times in whole seconds: 2 s).
        age = began - max(st.st_mtime_ns, st.st_ctime_ns)
        if age > _RACY_NS:
            self.known[key] = (*sig, digest)
            self.dirty.append((key, *sig, digest))
        elif age > _RACY_FINE_NS and _fine_times(st):
            self.settled[key] = (*sig, digest)
        return digest

    def changed(self, root: Path, files: dict[str, str], skip: frozenset[str]) -> str | None:
        """The first of ``files`` (path relative to ``root`` -> the digest a key was made of)
        whose bytes are not those any more, else None: a step's input changed while its body
        ran, so what the body made may not be what the key names. One stat each; a file whose
        signature moved is hashed again (a touch alone changes nothing). ``skip``: the
        step's own outputs (a step editing a file in place changes its input by design)."""
        for rel, digest in files.items():
            if rel in skip:
                continue
            path = root / rel
            try:
                st = os.stat(path)
            except OSError:
                return rel
            seen = self.used.get(str(path))
            if seen is not None and seen[:4] == signature(st):
                continue
            try:
                if sha256_file(path) != digest:
                    return rel
            except OSError:
                return rel
        return None

    def absent(self, path: Path, digest: str) -> None:
        """Note that a key was made of ``path`` being missing (a template looked for and not
        found: ``digest`` is what its loader recorded): the no-op fingerprint then checks it
        is still missing, as it checks a file hashed is unchanged."""
        self.used[str(path)] = (-1, -1, -1, -1, digest)

    def forget(self, path: Path) -> None:
        """Drop what is known of ``path`` (it was just rewritten)."""
        self.known.pop(str(path), None)
        self.settled.pop(str(path), None)
        self.used.pop(str(path), None)

    def flush(self) -> None:
        if self.journal is not None and self.dirty:
            self.journal.save_file_hashes(self.dirty)
            self.dirty = []
