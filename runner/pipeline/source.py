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
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidPipeline, Location
from ..regularfile import open_regular
from . import _fastyaml

Path_ = tuple[Hashable, ...]

MAX_ALIAS_VALUES = 100_000  # values all aliases of a document may repeat, together
MAX_ALIAS_CHARS = 16_000_000  # characters of text all aliases of a document may repeat
MAX_VALUES = 1_000_000  # values in a pipeline (as many as one value of an expression may hold)
MAX_DATA_VALUES = 10_000_000  # values in a data document (a `-p` value, a file read at run time)
MAX_FILE_BYTES = 16_000_000  # a pipeline or card file: larger data belongs in a file it reads
MAX_INT_DIGITS = 4_300  # Python's own limit for turning an integer into text (and back)
MAX_DEPTH = 200


@dataclass
class Sourced:
    """A parsed document and where each of its parts came from.

    A document the line reader (``_fastyaml``) read has no positions yet: ``text`` holds it
    until one is asked for, and ``where`` answers with a location that reads them (with the full
    reader, once for the document) only when its line or column is read, as an error or a
    warning is shown. A valid pipeline is thus read once, cheaply.
    """

    file: str
    data: Any
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    text: str | None = field(default=None, repr=False)  # read again for positions, when asked
    max_values: int = field(default=MAX_VALUES, repr=False)
    sha256: str | None = field(default=None, repr=False)  # of the bytes read (parse_file)

    def where(self, path: Path_ = (), *, key: bool = False) -> Location:
        """The location of the value (or, with key=True, of the key) at ``path``.

        Falls back to the nearest enclosing value we know, so an error is never placeless.
        """
        if self.text is not None:
            return _PendingLocation(self, tuple(path), key)
        table = self.keys if key else self.values
        p = tuple(path)
        while True:
            found = table.get(p) or (self.values.get(p) if key else None)
            if found is not None:
                return Location(self.file, *found)
            if not p:
                return Location(self.file, 1, 1)
            p = p[:-1]

    def find_positions(self) -> None:
        """Read the text again with the full reader for its positions (once)."""
        text = self.text
        if text is None:
            return
        try:
            from ._fullyaml import parse_full

            full = parse_full(text, self.file, self.max_values)
        except InvalidPipeline:  # pragma: no cover - the line reader reads only what it may
            full = Sourced(self.file, None)
        self.values, self.keys, self.text = full.values, full.keys, None


class _PendingLocation(Location):
    """``Sourced.where`` of a document read without positions: its line and column are found
    when first read (an error or warning shown), not when the location is taken."""

    def __init__(self, src: Sourced, path: Path_, key: bool) -> None:
        fields = self.__dict__  # frozen: set through the dict (two stores, no kwargs: a compile
        fields["file"] = src.file  # makes two of these a step)
        fields["_ask"] = (src, path, key)

    def _settled(self) -> Location:
        found: Location | None = self.__dict__.get("_found")
        if found is None:
            src, path, key = self.__dict__["_ask"]
            src.find_positions()
            found = src.where(path, key=key)
            object.__setattr__(self, "_found", found)
            object.__setattr__(self, "_ask", None)
        return found

    @property
    def line(self) -> int:
        return self._settled().line

    @property
    def column(self) -> int:
        return self._settled().column

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Location):
            return NotImplemented
        return (self.file, self.line, self.column) == (other.file, other.line, other.column)

    def __hash__(self) -> int:
        return hash((self.file, self.line, self.column))

    def __reduce__(self) -> tuple[Any, ...]:  # copied or pickled: a plain Location
        return (Location, (self.file, self.line, self.column))


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
