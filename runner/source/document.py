"""YAML read as YAML 1.2's core schema, as JSON can carry it, with every value's file:line:column.

Pipelines, `-p` values, cards and data files are all read here, one way:

- YAML 1.2 core schema: ``NO``, ``on``, ``yes`` and ``12:30`` are strings, ``010`` is ten, and
  dates stay strings (PyYAML's default is YAML 1.1, where they are booleans, octal, base 60 and
  datetimes: ``country: NO`` became ``False``).
- Only what JSON can carry: a value tagged anything but str, int, float, bool, null, seq or map
  (``!!binary``, ``!!timestamp``, ``!!set``, ``!!python/...``, ``!local``), ``.nan``/``.inf``,
  an integer too long to print and a non-string mapping key are errors at their position.
- Aliases may repeat at most ``MAX_ALIAS_VALUES`` values and ``MAX_ALIAS_CHARS`` characters of
  text in all, measured on the node tree before any value is built: a billion-laughs document,
  or a long string aliased many times, is refused in microseconds instead of filling memory.
- Duplicate keys are errors (PyYAML silently keeps the last), merge keys (``<<``) too.

Two readers, one answer: ``_fastyaml`` reads the common block shape line by line and declines
anything else; ``_fullyaml`` (libyaml's node tree, loaded only when needed) reads the rest, words
every error, and finds a line-read document's positions when one is first shown.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import InvalidPipeline, Location
from . import _fastyaml
from .regularfile import open_regular
from .sourced import (
    MAX_ALIAS_CHARS,
    MAX_ALIAS_VALUES,
    MAX_DATA_VALUES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_INT_DIGITS,
    MAX_VALUES,
    Path_,
    Sourced,
)

__all__ = [
    "MAX_ALIAS_CHARS",
    "MAX_ALIAS_VALUES",
    "MAX_DATA_VALUES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_VALUES",
    "Path_",
    "Sourced",
    "data_digest",
    "decode_utf8",
    "document_data",
    "keep_parsed",
    "load_data",
    "parse_file",
    "parse_text",
]


def _read_full(text: str, file: str, max_values: int) -> Sourced:
    from ._fullyaml import parse_full  # libyaml: loaded only when a document needs it

    return parse_full(text, file, max_values)


Sourced.full_reader = _read_full


def parse_text(text: str, file: str, *, max_values: int = MAX_VALUES) -> Sourced:
    """Parse YAML text into a Sourced document. Raises InvalidPipeline with a location."""
    if "\n" in text:  # a one-line text (a -p value) is as quick to read in full
        fast = _fastyaml.read(text, max_values)
        if fast is not None:
            return Sourced(file, fast[0], text=text, max_values=max_values)
    # libyaml loads only for a text the line reader declines
    from ._fullyaml import parse_full

    return parse_full(text, file, max_values)


def document_data(text: str) -> Any:
    """The values of a pipeline's text, or None when it is not a valid YAML document (the no-op
    fast path compares their ``data_digest``: comments, layout, quoting and anchors that yield
    the same values give the same digest, and the compiler, which sees only the values, makes the
    same plan of them)."""
    if len(text) > MAX_FILE_BYTES:
        return None
    try:
        return parse_text(text, "<digest>").data
    except InvalidPipeline:
        return None


def data_digest(data: Any) -> str:
    """sha256 of ``data`` as JSON, in its own key order (a reordering is another digest, which
    costs only speed). The readers give JSON values with string keys only, so 1, 1.0, true and
    "1" all stay apart."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return "data:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def load_data(text: str, file: str) -> Any:
    """A YAML data document (a `-p` value, a file read at run time), read as ``parse_text``
    reads pipelines. Raises InvalidPipeline with a location."""
    return parse_text(text, file, max_values=MAX_DATA_VALUES).data


def parse_file(path: Path, display: str | None = None) -> Sourced:
    """Read and parse a YAML file (UTF-8). Raises InvalidPipeline with a location."""
    name = display or str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InvalidPipeline(
                f"{name} is {size / 1e6:.1f} MB, over the limit of {MAX_FILE_BYTES / 1e6:g} MB",
                where=Location(name, 1, 1),
                hint="keep large data in a file the pipeline reads (`uses: read`)",
            )
        with open_regular(path) as f:  # a FIFO is refused, not waited on for ever
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise InvalidPipeline(
                f"{name} is over the limit of {MAX_FILE_BYTES / 1e6:g} MB",
                where=Location(name, 1, 1),
                hint="keep large data in a file the pipeline reads (`uses: read`)",
            )
    except FileNotFoundError:
        raise InvalidPipeline(f"no such file: {name}") from None
    except OSError as exc:
        raise InvalidPipeline(f"cannot read {name}: {exc.strerror}") from None
    sha = hashlib.sha256(raw).hexdigest()
    text = decode_utf8(raw, name)
    # Values read a moment ago (the fast path's check) are not read again: positions on demand.
    data = _PARSED.get(sha, _NOTHING)
    src = parse_text(text, name) if data is _NOTHING else Sourced(name, data, text=text)
    src.sha256 = sha
    return src


# Values of files read by sha256 of their bytes, kept by ``keep_parsed`` (the no-op fast path
# parses a pipeline to compare it, then compiles the same bytes: one read, not two).
_PARSED: dict[str, Any] = {}
_NOTHING = object()


def keep_parsed(sha: str, data: Any) -> None:
    """Remember ``data`` as what the bytes with this sha256 parse to (a few files at most).
    The values are shared, not copied: nothing that reads a pipeline changes them."""
    _PARSED.clear()
    _PARSED[sha] = data


def decode_utf8(raw: bytes, name: str) -> str:
    """``raw`` as UTF-8 text. Raises InvalidPipeline at the first bad byte's line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Point at the offending byte the way an editor would: line, then column in that line.
        line = raw.count(b"\n", 0, exc.start) + 1
        start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[start : exc.start].decode("utf-8", "replace")) + 1
        raise InvalidPipeline(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            where=Location(name, line, column),
        ) from None
