"""The declared types of card fields and inputs, checked one way everywhere (bool is not an int)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "bool",
        int: "int",
        float: "number",
        str: "string",
        list: "list",
        dict: "object",
    }.get(type(value), type(value).__name__)


def is_type(value: Any, declared: str) -> bool:
    """Whether ``value`` has the declared JSON type; a bool is never an int or a number."""
    if declared == "string":
        return isinstance(value, str)
    if declared == "int":
        return type(value) is int
    if declared == "number":
        return type(value) in (int, float)
    if declared == "bool":
        return isinstance(value, bool)
    if declared == "list":
        return isinstance(value, list)
    if declared == "object":
        return isinstance(value, dict)
    return False


# The exact type that is always a valid value of a declared type (the common case, one lookup).
_EXACT = {"string": str, "int": int, "bool": bool, "list": list, "object": dict, "number": float}


def type_problem(
    value: Any, declared: str, allowed: Sequence[Any] = (), nullable: bool = False
) -> str | None:
    """Why ``value`` is not a valid ``declared`` value, or None when it is."""
    if type(value) is _EXACT.get(declared):
        return None
    if type(value) is str and declared == "enum" and value in allowed:
        return None  # a str equals only a str: the same verdict as the typed comparison below
    if value is None:
        return None if nullable else f"is null, expected {declared}"
    if declared == "enum":
        # Compare with the type too, so True does not pass for an allowed 1.
        if any(type(value) is type(a) and value == a for a in allowed):
            return None
        return f"{value!r} is not one of {list(allowed)}"
    if not is_type(value, declared):
        return f"is {_type_name(value)} {_short(value)}, expected {declared}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
