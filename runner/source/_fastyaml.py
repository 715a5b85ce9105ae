"""The common shape of a pipeline file read line by line, without libyaml's node tree.

A pipeline is mostly block mappings and sequences of one-line scalars and one-line flow
collections: ``key: value``, ``- item``, ``key: ["a", b]``, ``with: {prompt: "...", n: [1]}``.
Reading that shape with one regular expression per line is several
times cheaper than composing libyaml's node tree (node and mark objects for every value) and
building values from it. ``read`` answers only for text it is sure of and returns ``None`` for
anything else (anchors, tags, block scalars, multi-line scalars, escapes it does not know, a
duplicate key, a value the core schema refuses, any doubt at all): the caller then reads the
text with libyaml as before, which also finds every error and its position. So this module never
decides what is an error, and what it returns equals what the full reader builds
(tests/source/test_fastyaml.py compares the two on generated documents).

Positions are not kept here: ``source.Sourced`` finds them with the full reader when one is
asked for (an error, a lint warning).
"""

from __future__ import annotations

import re
from typing import Any

from .coreschema import FLOAT, INT, NULL, NUMBER, STR, core_tag

# Anything libyaml reads differently from a plain line of printable text, or refuses: tabs,
# carriage returns, a byte order mark, NEL and the Unicode line separators (line breaks to
# libyaml), control characters and non-characters: an ASCII text holds only these bytes, any
# other text only this class. The class costs ~5 ms to compile, so only a non-ASCII text does.
_PRINTABLE_ASCII = b"\n" + bytes(range(0x20, 0x7F))
_UNSURE_TEXT = (
    "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
# A content line past its indent: an optional "- ", an optional plain key and its ':', the rest.
_BODY = re.compile(r"(-(?: +|$))?(?:([A-Za-z0-9_][A-Za-z0-9_./-]{0,200}):(?: +|$))?(.*)")
# The first character of a plain scalar: not an indicator (-, ?, : only before a non-space).
_PLAIN_START = re.compile(r"[^-?:,\[\]{}#&*!|>'\"%@` ]|[-?:][^ ]")
# Quoted scalars: possessive repeats, so a long one costs no backtracking state per character
# (`(?:[^"\\]|\\.)*` kept ~130 bytes a character: a 47 MB scalar took 6 GB).
_DOUBLE = re.compile(r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"( +#.*)? *')
_SINGLE = re.compile(r"'([^']*+(?:''[^']*+)*+)'( +#.*)? *")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
_ESCAPE = re.compile(r"\\(.)")
# A flow sequence item: double-quoted without escapes, single-quoted, or plain without any of
# the characters flow context gives a meaning (and ':' or '#', whose rules differ by version).
_FLOW_ITEM = re.compile(
    r' *(?:"([^"\\]*+)"|\'([^\']*+(?:\'\'[^\']*+)*+)\''
    r'|([^-?:,\[\]{}#&*!|>\'"%@` ][^,\[\]{}:#\'"]*?)) *'
    r"(,|\])"
)
_FLOW_PLAIN = re.compile(r"[^-?:,\[\]{}#&*!|>'\"%@` ][^,\[\]{}:#'\"]*")  # one plain item, as above
_MAX_DEPTH = 100  # deeper documents are left to the full reader (it refuses past 200)
_MAX_FLOW_DEPTH = 20  # nesting inside one line's flow collection
# A flow mapping's key (plain, as in a block mapping) with its ':' and the spaces after it.
_FLOW_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./-]{0,200}): +")
_FLOW_DOUBLE = re.compile(r'"([^"\\]*+)"')  # no escapes: those are the full reader's
_FLOW_SINGLE = re.compile(r"'([^']*+(?:''[^']*+)*+)'")


class _Unsure(Exception):
    """The text is not in the shape this reader knows: the full reader reads it."""


def read(text: str, max_values: int) -> tuple[Any] | None:
    """``(value,)`` of ``text`` when it has the common block shape, else ``None``."""
    if text.isascii():
        # What is left once the line break and printable ASCII are deleted, in C: a regular
        # expression's search over a 1.7 MB pipeline took 13 ms, this 1.
        if text.encode("ascii").translate(None, _PRINTABLE_ASCII):
            return None
    elif re.compile(_UNSURE_TEXT).search(text) is not None:
        return None
    try:
        return (_Reader(max_values).read(text),)
    except (_Unsure, RecursionError):
        return None


class _Reader:
    def __init__(self, max_values: int) -> None:
        self.max_values = max_values
        self.count = 0
        self.scalars: dict[str, Any] = {}  # a scalar's text -> its value (repeats are common)

    def read(self, text: str) -> Any:
        # frames: (indent, container); a list frame only takes "- " lines
        frames: list[tuple[int, Any]] = []
        # a key or "-" with nothing after it: (container, key or index, its indent, is a key)
        pending: tuple[Any, Any, int, bool] | None = None
        started = False
        body_match = _BODY.fullmatch
        keys_seen: set[str] = set()  # keys already known to be plain strings
        scalars = self.scalars
        count = 0
        top: Any = None  # frames[-1], kept at hand
        top_indent = -1
        for line in text.split("\n"):
            content = line.lstrip(" ")
            if not content or content[0] == "#":
                continue  # blank or comment
            n = len(line) - len(content)
            m = body_match(content)
            if m is None:  # pragma: no cover - the pattern matches any line without a break
                raise _Unsure
            dash, key, rest = m.groups()
            if pending is not None or n != top_indent or not started:
                if not started:
                    started = True
                    if n == 0 and not dash and key is None and _document_start(rest):
                        continue
                if n == 0 and not dash and (rest[:3] in ("---", "...") or rest[:1] == "%"):
                    raise _Unsure  # markers, directives, more documents
                if not frames:
                    frames.append((n, [] if dash else self._new_map(key)))
                elif pending is not None:
                    holder, slot, p_indent, by_key = pending
                    if dash and (n > p_indent or (n == p_indent and by_key)):
                        child: Any = []
                    elif key is not None and not dash and n > p_indent:
                        child = {}
                    elif n > p_indent:
                        raise _Unsure  # a scalar on the next line
                    else:
                        child = None
                    holder[slot] = child
                    pending = None
                    if child is not None:
                        frames.append((n, child))
                        if len(frames) > _MAX_DEPTH:
                            raise _Unsure
                top_indent, top = frames[-1]
                while n < top_indent:
                    frames.pop()
                    if not frames:
                        raise _Unsure
                    top_indent, top = frames[-1]
                if n != top_indent:
                    raise _Unsure
            if not dash and type(top) is list:  # a key after a list at the same indent
                frames.pop()
                if not frames:
                    raise _Unsure
                top_indent, top = frames[-1]
                if n != top_indent:
                    raise _Unsure
            count += 1
            if dash:
                if type(top) is not list:
                    raise _Unsure
                if key is None:
                    if not rest or rest[0] == "#":
                        top.append(None)
                        pending = (top, len(top) - 1, n, False)
                    elif rest in scalars:
                        top.append(scalars[rest])
                    elif rest[0] == "-" and (len(rest) == 1 or rest[1] == " "):
                        raise _Unsure  # "- - x"
                    else:
                        top.append(self._value(rest))
                    continue
                # "- key: ...": a mapping whose keys sit where this key does
                mapping: dict[str, Any] = {}
                top.append(mapping)
                n += len(dash)
                frames.append((n, mapping))
                if len(frames) > _MAX_DEPTH:
                    raise _Unsure
                top_indent, top = n, mapping
                count += 1
            elif key is None:
                raise _Unsure
            if key in top:
                raise _Unsure  # a duplicate: the full reader says where
            if key not in keys_seen:
                if core_tag(key) != STR:
                    raise _Unsure
                keys_seen.add(key)
            if not rest or rest[0] == "#":
                top[key] = None
                pending = (top, key, n, True)
            elif rest in scalars:
                top[key] = scalars[rest]
            else:
                top[key] = self._value(rest)
        self.count += count
        if not frames or self.count > self.max_values:
            raise _Unsure  # an empty document, or one over the bound: the full reader's answer
        return frames[0][1]

    def _new_map(self, key: str | None) -> dict[str, Any]:
        if key is None:
            raise _Unsure  # a scalar document
        return {}

    def _value(self, rest: str) -> Any:
        first = rest[0]
        if first == "[":
            return self._flow(rest)
        if first == "{":
            body = rest.rstrip(" ")
            value, end = self._flow_map(body, 0, 0)
            if end != len(body):
                raise _Unsure  # anything after the closing brace (a comment, more text)
            return value
        value = self.scalars[rest] = self._scalar(rest, first)
        return value

    def _scalar(self, rest: str, first: str) -> Any:
        if first == '"':
            m = _DOUBLE.fullmatch(rest)
            if m is None:
                raise _Unsure
            body = m.group(1)
            return _ESCAPE.sub(_unescape, body) if "\\" in body else body
        if first == "'":
            m = _SINGLE.fullmatch(rest)
            if m is None:
                raise _Unsure
            return m.group(1).replace("''", "'")
        if _PLAIN_START.match(rest) is None:
            raise _Unsure
        cut = rest.find(" #")
        text = (rest if cut < 0 else rest[:cut]).rstrip(" ")
        if ": " in text or text.endswith(":") or len(text) > 100_000:
            raise _Unsure
        return plain(text)

    def _flow(self, rest: str) -> list[Any]:
        if rest[-1] == "]":  # one item, as most are: no regular expression walk
            item = rest[1:-1].strip(" ")
            if "," not in item and "]" not in item and "[" not in item and len(item) > 1:
                if item[0] == '"' == item[-1] and '"' not in item[1:-1] and "\\" not in item:
                    self.count += 1
                    return [item[1:-1]]
                if _FLOW_PLAIN.fullmatch(item) is not None:
                    self.count += 1
                    return [plain(item)]
        body = rest.rstrip(" ")
        if body == "[]":
            return []
        if "{" in body or "[" in body[1:]:  # nested collections: the general flow reader
            value, end = self._flow_seq(body, 0, 0)
            if end != len(body):
                raise _Unsure
            return value
        end = body.find("]")
        if end != len(body) - 1:
            raise _Unsure  # nested, or anything after the closing bracket
        out: list[Any] = []
        pos = 1
        match = _FLOW_ITEM.match
        while True:
            m = match(body, pos)
            if m is None:
                raise _Unsure
            double, single, bare, sep = m.groups()
            if double is not None:
                out.append(double)
            elif single is not None:
                out.append(single.replace("''", "'"))
            else:
                out.append(plain(bare))
            self.count += 1
            pos = m.end()
            if sep == "]":
                if pos != len(body):
                    raise _Unsure
                return out

    # One-line flow collections of any nesting (``{type: array, default: []}``,
    # ``with: {prompt: "say ${{ item }}", n: [1, 2]}``): keys plain and strings under the core
    # schema, values the quoted strings without escapes and the plain scalars _FLOW_PLAIN
    # allows, or collections of the same. Anything else is the full reader's.

    def _flow_node(self, body: str, pos: int, depth: int) -> tuple[Any, int]:
        """The flow value starting at ``pos`` and the position after it."""
        if depth > _MAX_FLOW_DEPTH:
            raise _Unsure
        first = body[pos : pos + 1]
        if first == "{":
            return self._flow_map(body, pos, depth + 1)
        if first == "[":
            return self._flow_seq(body, pos, depth + 1)
        m = (_FLOW_DOUBLE if first == '"' else _FLOW_SINGLE if first == "'" else _FLOW_PLAIN).match(
            body, pos
        )
        if m is None:
            raise _Unsure
        if first == '"':
            return m.group(1), m.end()
        if first == "'":
            return m.group(1).replace("''", "'"), m.end()
        return plain(m.group(0).rstrip(" ")), m.end()

    def _flow_map(self, body: str, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        pos = _skip(body, pos + 1)
        if body[pos : pos + 1] == "}":
            return out, pos + 1
        while True:
            m = _FLOW_KEY.match(body, pos)
            if m is None:
                raise _Unsure
            key = m.group(1)
            if key in out or core_tag(key) != STR:
                raise _Unsure  # a duplicate, or a key the core schema reads as no string
            value, pos = self._flow_node(body, m.end(), depth)
            out[key] = value
            self.count += 1  # a pair, as the full reader counts a mapping's values
            closed, pos = _after_item(body, pos, "}")
            if closed:
                return out, pos

    def _flow_seq(self, body: str, pos: int, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        pos = _skip(body, pos + 1)
        if body[pos : pos + 1] == "]":
            return out, pos + 1
        while True:
            value, pos = self._flow_node(body, pos, depth)
            out.append(value)
            self.count += 1
            closed, pos = _after_item(body, pos, "]")
            if closed:
                return out, pos


def _after_item(body: str, pos: int, close: str) -> tuple[bool, int]:
    """After a flow collection's item: ``(True, the position past close)`` when the collection
    ends there, else ``(False, the next item's position)``. Anything else (a trailing or
    doubled comma, a missing one) is the full reader's."""
    pos = _skip(body, pos)
    sep = body[pos : pos + 1]
    if sep == close:
        return True, pos + 1
    if sep != ",":
        raise _Unsure
    pos = _skip(body, pos + 1)
    if body[pos : pos + 1] in (close, ",", ""):
        raise _Unsure
    return False, pos


def _skip(body: str, pos: int) -> int:
    """The position of the first character at or after ``pos`` that is not a space."""
    while body[pos : pos + 1] == " ":
        pos += 1
    return pos


def _document_start(rest: str) -> bool:
    return rest == "---" or (rest.startswith("--- ") and rest[4:].lstrip(" ")[:1] in ("", "#"))


def _unescape(m: re.Match[str]) -> str:
    found = _ESCAPES.get(m.group(1))
    if found is None:
        raise _Unsure
    return found


def plain(text: str) -> Any:
    """A plain scalar's value under the core schema; ``_Unsure`` for the values the full reader
    refuses (it words the error)."""
    tag = core_tag(text)
    if tag == STR:
        return text
    if tag == NULL:
        return None
    if tag == INT:
        if len(text) > 100:
            raise _Unsure
        if text[:2] in ("0o", "0x"):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text)
    if tag == FLOAT:
        if NUMBER.fullmatch(text) is None:
            raise _Unsure  # .inf, .nan
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise _Unsure
        return value
    return text in ("true", "True", "TRUE")
