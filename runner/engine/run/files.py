"""Content hashes of workspace files, cached by (size, mtime, inode) in the journal.

Touching a file changes its mtime: it is re-hashed, its content hash is unchanged, so nothing
downstream re-runs.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from ...source.beneath import open_beneath
from ...state.filedigest import sha256_file
from ...state.journal import Journal

_RACY_NS = 2_000_000_000


def _sha256_beneath(root: Path, path: Path) -> str:
    with os.fdopen(open_beneath(root, path.relative_to(root).as_posix()), "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class FileHasher:
    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal
        self.known = journal.file_hashes() if journal is not None else {}
        self.dirty: list[tuple[str, int, int, int, str]] = []
        # every file hashed in this run: (size, mtime_ns, inode, sha256)
        self.used: dict[str, tuple[int, int, int, str]] = {}

    def hash(self, path: Path, *, root: Path | None = None) -> str:
        """sha256 of the file at ``path``; raises FileNotFoundError when it is missing. With
        ``root`` (``path`` lies beneath it), the bytes hashed are those of the file as opened
        now, refused (source.beneath.OutsideRoot, NotRegularFile: OSErrors) when a directory
        on its path became a symlink pointing out since the pipeline compiled."""
        st = os.stat(path)
        key = str(path)
        sig = (st.st_size, st.st_mtime_ns, st.st_ino)
        cached = self.known.get(key)
        if cached is not None and cached[:3] == sig:
            self.used[key] = (*sig, cached[3])
            return cached[3]
        digest = sha256_file(path) if root is None else _sha256_beneath(root, path)
        self.used[key] = (*sig, digest)
        # A file modified within the clock's granularity of now could change again without its
        # (size, mtime) changing ("racily clean"): only trust signatures that are old enough.
        if time.time_ns() - st.st_mtime_ns > _RACY_NS:
            self.known[key] = (*sig, digest)
            self.dirty.append((key, *sig, digest))
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
            if seen is not None and seen[:3] == (st.st_size, st.st_mtime_ns, st.st_ino):
                continue
            try:
                if sha256_file(path) != digest:
                    return rel
            except OSError:
                return rel
        return None

    def forget(self, path: Path) -> None:
        """Drop what is known of ``path`` (it was just rewritten)."""
        self.known.pop(str(path), None)
        self.used.pop(str(path), None)

    def flush(self) -> None:
        if self.journal is not None and self.dirty:
            self.journal.save_file_hashes(self.dirty)
            self.dirty = []
