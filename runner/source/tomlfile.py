"""runner.toml: finding the nearest one, and where a key is written in it (tomllib keeps no
positions, messages want file:line:column). Imports nothing heavy: every apply reads it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import Location, UsageError
from .regularfile import not_regular


def find_runner_toml(start: Path) -> Path | None:
    """The nearest ``runner.toml`` in ``start`` (a directory or a file's) or above it.

    Raises UsageError for one that is there but not a regular file (a FIFO, a directory, a
    link to nothing): passed over, its budget, signing key and providers would be lost without
    a word, and a runner.toml further up (or none) taken instead."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "runner.toml"
        if candidate.is_file():
            return candidate
        if os.path.lexists(candidate):
            what = not_regular(candidate) or "a symlink to nothing"
            raise UsageError(
                f"{candidate} is {what}, not a regular file: runner reads its settings (providers, "
                "budget, cache signing key) from it and will not go on without them",
                hint="make runner.toml a regular file (or remove it)",
            )
    return None


def toml_location(
    path: str, text: str, table: str, key: str | None = None, *, at_value: bool = True
) -> Location:
    """The line of ``key = ...`` inside ``[table]`` (the column of its value, or of the key
    with ``at_value=False``), else of the table's header.

    A plain scan of the text: right for the ``[table]`` + ``key = value`` form the docs show;
    other spellings (inline tables, dotted keys) are placed at the header, or at the file."""
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    assignment = re.compile(r"^(\s*)(" + re.escape(key or "") + r"\s*=\s*)") if key else None
    inside, found = False, None
    for n, line in enumerate(text.splitlines(), 1):
        if header.match(line):
            inside, found = True, Location(path, n, line.index("[") + 1)
            continue
        if inside and any_header.match(line):
            inside = False
        if inside and assignment is not None:
            m = assignment.match(line)
            if m:
                return Location(path, n, (m.end() if at_value else len(m.group(1))) + 1)
    return found or Location(path)
