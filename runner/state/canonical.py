"""Canonical JSON and hashing: one function used for cache keys, cards and idempotency keys.

canonical = json.dumps(sort_keys=True, ensure_ascii=False, separators=(",", ":"),
allow_nan=False), UTF-8. Values that are not JSON types are an error, never coerced with str().
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

JSONValue = Any


class CanonicalError(ValueError):
    """A value cannot be canonicalised (not a JSON type, NaN, a non-string key)."""


_INF = (float("inf"), float("-inf"))
_LEAF = frozenset({str, int, bool, type(None)})

# One encoder for every canonical text. Values reach it only after validation, which never
# returns for a cyclic value, so the encoder's own cycle bookkeeping would be wasted work.
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    ensure_ascii=False,
    separators=(",", ":"),
    allow_nan=False,
    check_circular=False,
)


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


if c_make_encoder is not None:
    # What _ENCODER.encode runs, made once: encode() builds this C encoder again at every call
    # (~1 us of a small record's ~1.7). Same options, so the same text, byte for byte.
    _CHUNKS = c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", True, False, False)

    def compact_json(value: JSONValue) -> str:
        """``value`` as JSON with sorted keys and no spaces, not validated first: ValueError
        for a NaN or infinity, TypeError for what JSON has not, RecursionError for a value
        that holds itself (no cycle bookkeeping)."""
        return "".join(_CHUNKS(value, 0))

else:  # an interpreter without the C accelerator

    def compact_json(value: JSONValue) -> str:
        return _ENCODER.encode(value)


class _NotPlain(Exception):
    """Raised by ``_plain_copy`` at the first value that is not an exact JSON type."""


def _plain(value: object) -> bool:
    """True when ``value`` is made of exact JSON types only (the common case), checked without
    recursion; anything else goes through ``_check``, which accepts subclasses of str/list/dict
    and names the path of what it refuses."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            continue
        if t is dict:
            for k in v:  # type: ignore[attr-defined]
                if type(k) is not str:
                    return False
            push(v.values())  # type: ignore[attr-defined]
        elif t is list:
            push(v)  # type: ignore[arg-type]
        elif t is float:
            if v != v or v in _INF:
                return False
        else:
            return False
    return True


def _validate(value: object) -> None:
    if not _plain(value):
        _check(value, "$")


def plain_copy(value: JSONValue, path: str = "$") -> JSONValue:
    """A copy of ``value`` made of plain JSON types only (new lists and dicts; subclasses of
    str, list and dict become their base type). Raises CanonicalError naming the first thing
    under ``path`` that is not JSON."""
    try:
        return _plain_copy(value)
    except _NotPlain:
        _check(value, path)
        return json.loads(json.dumps(value))  # only accepted subclasses get here


def _plain_copy(value: Any) -> Any:
    """A copy of ``value`` made of new lists and dicts, checked in the same walk: what the JSON
    round trip gives for exact JSON types, at a fraction of its cost. Raises _NotPlain at
    anything else (a subclass, a non-string key, NaN...), which the caller sends to ``_check``."""
    t = type(value)
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            out[k] = v if type(v) in _LEAF else _plain_copy(v)
        return out
    if t is list:
        return [v if type(v) in _LEAF else _plain_copy(v) for v in value]
    if t in _LEAF:
        return value
    if t is float and value == value and value not in _INF:
        return value
    raise _NotPlain


def _check(value: object, path: str) -> None:
    # json.dumps would coerce int subclasses, tuples and non-str keys silently: refuse them here.
    if value is None or isinstance(value, (str, bool)):
        return
    if isinstance(value, int):
        if type(value) is not int:
            raise CanonicalError(f"{path}: {type(value).__name__} is not a JSON type")
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise CanonicalError(f"{path}: {value!r} is not allowed in canonical JSON")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalError(f"{path}: key {k!r} is not a string")
            _check(v, f"{path}.{k}")
        return
    raise CanonicalError(f"{path}: {type(value).__name__} is not a JSON type")


def sort_unordered(items: list[Any], by: str | None) -> list[Any]:
    """A declared unordered list in canonical order: by value (``by`` None; strings as they
    are, anything else by its canonical JSON) or by the fields ``"f1|f2"`` of its objects.
    Raises CanonicalError when an element is not an object or lacks a field."""
    if by is None:
        if all(type(it) is str for it in items):
            return sorted(items)  # a string is its own sort key
        return sorted(items, key=lambda it: it if isinstance(it, str) else canonical_json(it))
    fields = by.split("|")
    return sorted(items, key=lambda it: _fields_key(it, fields, by))


def _fields_key(item: object, fields: list[str], by: str) -> str:
    if not isinstance(item, Mapping):
        raise CanonicalError(f"cannot sort by '{by}': element {item!r} is not an object")
    parts = []
    for field in fields:
        if field not in item:
            raise CanonicalError(f"cannot sort by '{by}': element lacks '{field}'")
        v = item[field]
        parts.append(v if isinstance(v, str) else canonical_json(v))
    return "\x1f".join(parts)


def _get_path(doc: object, path: Sequence[str]) -> tuple[object, str] | None:
    node = doc
    for part in path[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node, path[-1]


def prepare(
    value: JSONValue,
    *,
    exclude: Iterable[str] = (),
    unordered: Mapping[str, str | None] | Iterable[str] = (),
) -> JSONValue:
    """A copy of ``value``: ``exclude`` top-level keys dropped, unordered lists sorted.

    ``unordered`` maps a dotted path ("a.b.list") to a sort key ("field" or "f1|f2"), or None to
    sort by value; a plain iterable of paths sorts each by value. Missing paths are ignored.
    """
    doc = plain_copy(value)
    if isinstance(doc, dict):
        for key in exclude:
            doc.pop(key, None)
    paths = unordered.items() if isinstance(unordered, Mapping) else ((p, None) for p in unordered)
    for dotted, by in paths:
        found = _get_path(doc, dotted.split("."))
        if found is None:
            continue
        parent, last = found
        if isinstance(parent, dict) and isinstance(parent.get(last), list):
            parent[last] = sort_unordered(parent[last], by)
    return doc


def canonical_json(value: JSONValue) -> str:
    """The canonical JSON text of ``value``; raises CanonicalError for non-JSON values."""
    _validate(value)
    return compact_json(value)


def canonical_bytes(value: JSONValue) -> bytes:
    return utf8(canonical_json(value))


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (a file name or argument that was not UTF-8, a
    ``\\ud800`` escape) raises CanonicalError: such a value has no canonical form."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise CanonicalError(
            f"a string holds {bad}, which is not text (a name or value that was not UTF-8?)"
        ) from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: JSONValue) -> str:
    """sha256 hex of the canonical JSON of ``value``."""
    return sha256_hex(canonical_bytes(value))


def short_hash(value: JSONValue, length: int = 16) -> str:
    return digest(value)[:length]


def prepared_short_hash(doc: JSONValue, length: int = 16) -> str:
    """short_hash of a value returned by ``prepare`` (already checked and plain JSON after its
    round trip, so it is not walked again: card hashing does this twice per card)."""
    return sha256_hex(utf8(compact_json(doc)))[:length]


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(token: str) -> float:
    value = float(token)
    if value in _INF:
        raise ValueError(f"the number {token[:40]} is out of range (it would be infinity)")
    return value


_STRICT = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def loads_strict(data: str | bytes) -> Any:
    """JSON as RFC 8259 has it (what a provider's reply or a remote record may hold): NaN,
    Infinity, -Infinity and numbers overflowing to infinity are refused, as is nesting deep
    enough to exhaust the stack and a lone UTF-16 surrogate escape (``"\\ud800"``: no text,
    and no journal, can hold it; a pair is one character and fine). Raises ValueError
    (json.JSONDecodeError for bad syntax)."""
    text = data if isinstance(data, str) else data.decode(json.detect_encoding(data))
    try:
        value = _STRICT.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(value):
        raise ValueError("a string holds a lone UTF-16 surrogate escape, which is not text")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False
