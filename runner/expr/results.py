"""What an evaluation hands back: JSON values only.

A value an expression makes goes into cache keys, the journal and step arguments, all JSON. So a
result is made plain here, at the element that produced it: a tuple (``dictsort``, ``(1, 2)``)
becomes a list, a lazy sequence (``map``, ``select``, ``batch``), a ``range`` or a dict view is
read into one under the evaluation's budget, Markup becomes text; and what JSON cannot carry
(NaN, infinity, a mapping key that is not a string, a set, a method) is refused with a message
saying what it was.
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterable, Iterator, KeysView, ValuesView
from typing import Any

import jinja2
from markupsafe import Markup

from .sandbox import tick

# Read into a list: lazy sequences (`map`, `select`), `range(3)`, `d.items()`. Not a set: its
# order is not stable, and a key made from it would not be either.
_SEQUENCES = (Iterator, range, KeysView, ValuesView, ItemsView)


class NotJSON(Exception):
    """A result JSON cannot carry; the message says what and where in the value."""


def as_json(value: Any) -> Any:
    """``value`` as plain JSON types. Raises NotJSON, or SandboxRefused when reading a lazy
    sequence goes over the budget."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    return _convert(value, "")


def _convert(value: Any, at: str) -> Any:
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        if not math.isfinite(value):
            raise NotJSON(f"{_place(at)}{value} (JSON has no NaN or infinity)")
        return value
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, str):  # a str subclass
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):  # an int subclass
        return int(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotJSON(f"{_place(at)}a mapping key {k!r} that is not a string")
            out[str(k)] = _convert(v, f"{at}.{k}" if at else str(k))
        return out
    if isinstance(value, (list, tuple)):
        return [_convert(v, f"{at}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, _SEQUENCES) and not isinstance(value, jinja2.Undefined):
        return [_convert(v, f"{at}[{i}]") for i, v in enumerate(_bounded(value))]
    if isinstance(value, jinja2.Undefined):
        raise NotJSON(f"{_place(at)}an undefined value")
    raise NotJSON(f"{_place(at)}a {type(value).__name__}, which is not a JSON value")


def _bounded(items: Iterable[Any]) -> Iterator[Any]:
    for item in items:
        tick()  # each element read costs one budget step, as a loop's would
        yield item


def _place(at: str) -> str:
    return f"at {at}: " if at else ""
