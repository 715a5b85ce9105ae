"""A parsed document with every value's file:line:column, and the limits every reader keeps.

The type stands apart from the readers (``document`` chooses one, ``_fastyaml`` and
``_fullyaml`` read): the full reader builds ``Sourced`` values, and a line-read ``Sourced`` asks
the full reader for its positions through ``Sourced.full_reader``, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import InvalidPipeline, Location

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
    # The full reader (libyaml), set by document.py: this type does not import the readers.
    full_reader: ClassVar[Callable[[str, str, int], Sourced] | None] = None

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
        reader = Sourced.full_reader
        assert reader is not None, "set by runner.source.document (which makes text-only ones)"
        try:
            full = reader(text, self.file, self.max_values)
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
