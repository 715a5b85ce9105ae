"""Expression shapes: parse ``steps.a.output.x == 'y'`` once for every ``steps.?.?.? == '?'``.

Pipelines repeat a handful of expression shapes with different names and constants (10,000 steps
each reading ``steps.<previous>.output.short``), and Jinja's lexer and parser cost ~0.3 ms per
expression. ``split`` cuts a source into a *shape* (every non-keyword name, integer and string
replaced by a numbered placeholder) and the values that filled the slots. The shape is parsed
by Jinja itself, once; an instance's tree is the shape's tree with the values put back.

Soundness rests on ``split`` accepting only a conservative ASCII subset whose tokens Jinja lexes
the same way whatever the names and constants (no floats, no escapes, no keywords replaced, no
``}}``), and on ``Shape.build`` refusing a shape whose parse does not hold every placeholder
exactly once, whole (adjacent strings joined, dotted filter names). Anything else falls back to
a full parse, which also produces every error message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes

from .lookup import KEYWORDS as KEYWORDS

# The subset, token by token: each alternative is atomic, as a lexer commits to a token.
_SUBSET = re.compile(
    r"(?>[ \t\n]++"
    r"|[A-Za-z_][A-Za-z0-9_]*+"
    r"|(?:0|[1-9][0-9]*+)(?![0-9A-Za-z_.])"
    r"|'[^'\\\n]*+'|\"[^\"\\\n]*+\""
    r"|\*\*|//|==|!=|>=|<=|[-+/*%~\[\](){}<>=.:|,;])*+"
)
# In a source of the subset, the slots (names, integers, strings) found left to right.
_SLOTS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)|('[^'\\\n]*'|\"[^\"\\\n]*\")")
_INT_BASE = 7_000_000_000  # integer placeholders: far above any line number
_PREFIX = "zq"  # name and string placeholders: zq0, zq1, ... (every user name is replaced)

Placeholder = str | int
# For code that looks for placeholders in what was built from a shape (see sharing._SharedCode).
PLACEHOLDER_TEXT = _PREFIX
PLACEHOLDER_INT = _INT_BASE


def split(source: str) -> tuple[str, tuple[Placeholder, ...], tuple[Any, ...]] | None:
    """(shape text, the placeholder of each slot, the value of each slot), or None when the
    source is outside the subset (the caller then parses it in full)."""
    if not source.isascii() or "}}" in source or _SUBSET.fullmatch(source) is None:
        return None
    pieces = _SLOTS.split(source)
    holders: list[Placeholder] = []
    values: list[Any] = []
    for i in range(1, len(pieces), 4):
        name, number, string = pieces[i : i + 3]
        pieces[i + 1] = pieces[i + 2] = ""
        if name is not None:
            if name in KEYWORDS:
                pieces[i] = name
                continue
            holder: Placeholder = f"{_PREFIX}{len(values)}"
            pieces[i] = holder
            values.append(name)
        elif number is not None:
            holder = _INT_BASE + len(values)
            pieces[i] = str(holder)
            values.append(int(number))
        else:
            holder = f"{_PREFIX}{len(values)}"
            pieces[i] = f"'{holder}'"
            values.append(string[1:-1])
        holders.append(holder)
    return "".join(pieces), tuple(holders), tuple(values)


@dataclass(frozen=True)
class Shape:
    """A parsed shape whose every placeholder sits exactly once, whole, in the tree."""

    tree: nodes.Expr

    @classmethod
    def build(
        cls, text: str, holders: tuple[Placeholder, ...], parse: Callable[[str], nodes.Expr]
    ) -> Shape | None:
        """Parse ``text`` with ``parse``; None if it fails or the placeholders do not map
        one-to-one onto tree fields."""
        try:
            tree = parse(text)
        except Exception:  # any failure: the full parse reports it
            return None
        wanted = set(holders)
        seen: list[Placeholder] = []
        stack: list[Any] = [tree]
        while stack:
            item = stack.pop()
            if isinstance(item, nodes.Node):
                stack.extend(item.__dict__.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            elif type(item) is str:
                if item in wanted:
                    seen.append(item)
                elif _PREFIX in item:
                    return None  # a placeholder merged into a larger value
            elif type(item) is int and item >= _INT_BASE:
                if item not in wanted:
                    return None
                seen.append(item)
        if len(seen) != len(wanted) or set(seen) != wanted:
            return None
        return cls(tree)


def instantiate(node: nodes.Node, mapping: dict[Placeholder, Any]) -> Any:
    """A fresh copy of a shape's tree with every placeholder replaced by its value."""
    new = object.__new__(type(node))
    fields = new.__dict__
    for key, value in node.__dict__.items():
        fields[key] = _fill(value, mapping)
    return new


def _fill(value: Any, mapping: dict[Placeholder, Any]) -> Any:
    if isinstance(value, nodes.Node):
        return instantiate(value, mapping)
    if isinstance(value, list):
        return [_fill(v, mapping) for v in value]
    if isinstance(value, tuple):
        return tuple(_fill(v, mapping) for v in value)
    if type(value) is str or (type(value) is int and value >= _INT_BASE):
        return mapping.get(value, value)
    return value
