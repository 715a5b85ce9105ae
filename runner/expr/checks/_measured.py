"""What a failed comparison measured: ``output.text | length > 10`` failing says "`output.text |
length` is 8, wanted > 10", not only "found False" (a user cannot fix a check whose reading they
cannot see).

Only an expression whose top level is one comparison is split: comparisons bind looser than
filters, arithmetic and ``~``, and tighter than ``and``/``or``/``not``/``if``, so with none of
those at the top level the text left and right of the operator are whole expressions. Each side
is evaluated in the sandbox like the check itself; anything that does not split or evaluate
cleanly gives no reading, and the check's message stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import RunnerError
from .base import show

_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_LOOSER = {"and", "or", "not", "if", "else", "is"}  # words that bind looser than a comparison
_OPEN, _CLOSE = {"(", "[", "{"}, {")", "]", "}"}


def split_comparison(source: str) -> tuple[str, str, str] | None:
    """(left, operator, right) of a top-level comparison, each stripped; None for anything else
    (no comparison, a chain ``a < b < c``, ``and``/``or``/``not``/``if`` at the top level,
    text the lexer refuses)."""
    from ..sandbox import environment

    try:
        tokens = list(environment().lexer.tokeniter(source, None, state="variable"))
    except Exception:  # a lexing error: the check's own evaluation says what is wrong
        return None
    depth, pos, found = 0, 0, None
    for i, (_line, kind, value) in enumerate(tokens):
        start, pos = pos, pos + len(value)
        if kind == "operator" and value in _OPEN:
            depth += 1
        elif kind == "operator" and value in _CLOSE:
            depth -= 1
        elif depth:
            continue
        elif (kind == "operator" and value in _COMPARE) or (kind == "name" and value == "in"):
            if found is not None:
                return None  # a chain: which pair failed is not one reading
            op = value
            if value == "in" and _previous_word(tokens, i) == "not":
                op, start = "not in", _not_start(tokens, i)
            found = (start, pos, op)
        elif kind == "name" and value in _LOOSER:
            if value == "not" and _next_word(tokens, i) == "in":
                continue  # `x not in y`: one operator
            return None
    if found is None or pos != len(source):
        return None
    start, end, op = found
    left, right = source[:start].strip(), source[end:].strip()
    return (left, op, right) if left and right else None


def _previous_word(tokens: list[tuple[int, str, str]], i: int) -> str | None:
    for _line, kind, value in reversed(tokens[:i]):
        if kind != "whitespace":
            return value if kind == "name" else None
    return None


def _next_word(tokens: list[tuple[int, str, str]], i: int) -> str | None:
    for _line, kind, value in tokens[i + 1 :]:
        if kind != "whitespace":
            return value if kind == "name" else None
    return None


def _not_start(tokens: list[tuple[int, str, str]], i: int) -> int:
    """Where the ``not`` of a ``not in`` starting before token ``i`` begins in the source."""
    j = i - 1
    while tokens[j][1] == "whitespace":
        j -= 1
    return sum(len(value) for _line, _kind, value in tokens[:j])


def measured(source: str, context: Mapping[str, Any]) -> str | None:
    """The reading of a failed top-level comparison, "`LEFT` is VALUE, wanted OP RIGHT" (RIGHT
    as written when it reads no name, else with its value), or None when there is none."""
    from ..compiling import compile_expression

    split = split_comparison(source)
    if split is None:
        return None
    left, op, right = split
    try:
        value = compile_expression(left).evaluate(context)
        other = compile_expression(right)
        wanted = right
        if other.refs:  # a constant is its own value; a name's value is worth seeing
            wanted = f"`{right}` ({show(other.evaluate(context))})"
    except RunnerError:
        return None
    return f"`{left}` is {show(value)}, wanted {op} {wanted}"
