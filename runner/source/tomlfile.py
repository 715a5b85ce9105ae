"""runner.toml: finding the nearest one, reading it (``loads_toml``: its plain form without
tomllib), and where a key is written in it (tomllib keeps no positions, messages want
file:line:column). Imports nothing heavy: every apply reads it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

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


# -- reading runner.toml without tomllib -----------------------------------------------------------
# Every apply reads runner.toml (its secret names at start-up, its providers, its prices), and
# importing tomllib costs ~3.5 ms of a process. The form runner.toml is written in (tables of
# bare keys, ``key = value`` with a plain string, an integer or a boolean, comments) is read
# here; anything else (another value, an escape, a dotted or quoted key, a table declared twice
# or after its sub-table, a control character) by tomllib itself, which also words every error.
_BARE = r"[A-Za-z0-9_-]+"
_END = r"[ \t]*(?:#[^\n]*)?"
_HEADER = re.compile(rf"\[({_BARE}(?:\.{_BARE})*)\]{_END}")
_PAIR = re.compile(
    rf"({_BARE})[ \t]*=[ \t]*"
    r"(?:\"([^\"\\]*)\"|'([^']*)'|([+-]?(?:0|[1-9][0-9]*))(?![0-9_.eE:xob-])|(true|false)\b)"
    rf"{_END}"
)
_BLANK = re.compile(_END)
# What TOML refuses in strings and comments (control characters but tab), a byte-order mark,
# and a carriage return (CRLF files): left to tomllib.
_REFUSED = re.compile("[\x00-\x08\x0a-\x1f\x7f\ufeff]")


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``: the same tables and values, or its TOMLDecodeError (a
    ValueError)."""
    found = _plain_toml(text)
    if found is not None:
        return found
    import tomllib

    return tomllib.loads(text)


def _plain_toml(text: str) -> dict[str, Any] | None:
    """The tables of ``text`` when it is all in runner.toml's plain form, else None."""
    root: dict[str, Any] = {}
    table = root
    declared: set[str] = set()
    for line in text.split("\n"):
        if _REFUSED.search(line):
            return None
        line = line.lstrip(" \t")
        if line.startswith("["):
            m = _HEADER.fullmatch(line)
            if m is None or m.group(1) in declared:
                return None
            declared.add(m.group(1))
            table = root
            for name in m.group(1).split("."):
                inner = table.get(name)
                if inner is None:
                    inner = table[name] = {}
                elif not isinstance(inner, dict):
                    return None
                table = inner
            if table:  # made by an earlier sub-table's header (or holding keys): tomllib decides
                return None
            continue
        m = _PAIR.fullmatch(line)
        if m is None:
            if _BLANK.fullmatch(line):
                continue
            return None
        key, basic, literal, integer, boolean = m.groups()
        if key in table:
            return None
        if basic is not None:
            table[key] = basic
        elif literal is not None:
            table[key] = literal
        elif integer is not None:
            table[key] = int(integer)
        else:
            table[key] = boolean == "true"
    return root
