"""Paths named by pipelines or users never escape their root."""

from __future__ import annotations

import os
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
    if os.path.isabs(text):
        raise InvalidPipeline(
            f"path '{text}' is absolute; pipeline paths are relative to {root}", where=where
        )
    base = root.resolve()
    target = (base / text).resolve()
    if target != base and base not in target.parents:
        raise InvalidPipeline(
            f"path '{text}' escapes the pipeline root {base}",
            where=where,
            hint="declare a wider `root:` in the pipeline if this is intended",
        )
    return target


def relative(root: Path, path: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()
