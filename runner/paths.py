"""Paths named by pipelines or users never escape their root."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from .errors import InvalidPipeline, Location


def inside(root: Path, rel: str | os.PathLike[str], *, where: Location | None = None) -> Path:
    """Resolve ``rel`` against ``root`` and refuse it when it ends up outside ``root``.

    Absolute paths, ``..`` walks and symlinks that point out are all refused (symlinks are
    resolved before the check). Raises InvalidPipeline.
    """
    text = os.fspath(rel)
    if not text:
        raise InvalidPipeline("empty path", where=where)
    if "\x00" in text:
        raise InvalidPipeline(f"path {text!r} contains a NUL byte", where=where)
    if os.path.isabs(text):
        raise InvalidPipeline(
            f"path '{text}' is absolute; pipeline paths are relative to {root}", where=where
        )
    base, target = _resolved(os.path.abspath(root), text)
    if target != base and base not in target.parents:
        raise InvalidPipeline(
            f"path '{text}' escapes the pipeline root {base}",
            where=where,
            hint="declare a wider `root:` in the pipeline if this is intended",
        )
    return target


@lru_cache(maxsize=65536)
def _resolved(root: str, rel: str) -> tuple[Path, Path]:
    # Resolving walks every component with lstat: cache it for the life of one command.
    base = Path(os.path.realpath(root))
    return base, Path(os.path.realpath(os.path.join(base, rel)))


def relative(root: Path, path: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()
