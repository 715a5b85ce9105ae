"""The files a `read` step's glob names, as the step and the no-op fast path both see them (a
small module: the fast path checks a glob's matches without importing the step types)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ..errors import InvalidPipeline, Location
from .paths import inside

WILD = "*?["


def check_pattern(root: Path, pattern: str, where: Location | None = None) -> None:
    """A glob stays inside the root: its fixed leading part resolves inside it, and no part
    after a wildcard climbs with `..`. Raises InvalidPipeline."""
    if os.path.isabs(pattern):
        inside(root, pattern, where=where)  # refuses it, worded as for any absolute path
    parts = PurePosixPath(pattern).parts
    fixed = 0
    while fixed < len(parts) and not any(ch in parts[fixed] for ch in WILD):
        fixed += 1
    if ".." in parts[fixed:]:
        raise InvalidPipeline(
            f"path '{pattern}' escapes the pipeline root {os.path.realpath(root)}",
            where=where,
            hint="a glob may not climb with '..' after a wildcard",
        )
    if fixed:
        prefix = "/".join(parts[:fixed])
        try:
            inside(root, prefix, where=where)
        except InvalidPipeline as exc:  # word it for the pattern the user wrote
            exc.message = exc.message.replace(f"'{prefix}'", f"'{pattern}'", 1)
            raise


def matches(root: Path, pattern: str) -> list[str]:
    """The files ``pattern`` names, relative to the root: a glob's matches in sorted order
    (each inside the root), or the one path. Raises InvalidPipeline for a path that escapes."""
    if any(ch in pattern for ch in WILD):
        check_pattern(root, pattern)
        base = root.resolve()
        found = []
        for p in sorted(root.glob(pattern)):
            if p.is_file():
                inside(root, p.relative_to(root).as_posix())
                found.append(p.resolve().relative_to(base).as_posix())
        return found
    inside(root, pattern)
    return [pattern]
