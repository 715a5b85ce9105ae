"""Data files read at run time (`read {as: json|yaml}`, schema files, compliance profiles).

Both formats give only what JSON can carry and refuse the rest at its file:line:column: YAML is
read as pipelines are (YAML 1.2 core schema, bounded aliases; see ``runner.source.document``),
and JSON without Python's extensions (``NaN``, ``Infinity``), numbers that overflow to infinity
or are too long to print, and nesting deep enough to exhaust the stack.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import InvalidPipeline, Location
from .document import MAX_INT_DIGITS, load_data


def load_yaml(text: str, name: str) -> Any:
    """A YAML document. Raises InvalidPipeline with a location."""
    return load_data(text, name)


class _Refused(Exception):
    def __init__(self, token: str, problem: str) -> None:
        super().__init__(problem)
        self.token = token
        self.problem = problem


def _constant(token: str) -> Any:
    raise _Refused(token, f"'{token}' is not JSON (JSON has no NaN or infinity)")


def _float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise _Refused(token, f"the number {_clip(token)} is out of range")
    return value


def _int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(
            token,
            f"an integer of {len(token.lstrip('-'))} digits is over the limit of {MAX_INT_DIGITS}",
        )
    return int(token)


_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_float, parse_int=_int)


def load_json(text: str, name: str) -> Any:
    """A JSON document. Raises InvalidPipeline with a location."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InvalidPipeline(
            f"invalid JSON: {exc.msg}", where=Location(name, exc.lineno, exc.colno)
        ) from None
    except _Refused as exc:
        raise InvalidPipeline(exc.problem, where=_locate(text, name, exc.token)) from None
    except RecursionError:  # the C scanner stops at the interpreter's recursion limit
        raise InvalidPipeline("JSON nested too deeply", where=Location(name, 1, 1)) from None


# Tokens outside strings: to find the one a hook refused (hooks are not told where they are).
_TOKENS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|NaN|-?Infinity|[-+0-9.eE]+', re.DOTALL)


def _locate(text: str, name: str, token: str) -> Location:
    for m in _TOKENS.finditer(text):
        if m.group() == token:
            line = text.count("\n", 0, m.start()) + 1
            return Location(name, line, m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1)
    return Location(name, 1, 1)


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
