"""The budget of one evaluation or render and the size limits of its values, without Jinja.

The sandbox (sandbox.py) wraps every Jinja filter in ``guard`` and runs every expression under
a ``Budget``; the Jinja-free evaluator of plain expressions (plain.py) calls the same guards
under the same budget, so both refuse exactly the same values. Nothing here imports Jinja: a
process whose expressions are all plain never loads it.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any

MAX_TEMPLATE_CHARS = 1_000_000
MAX_RANGE = 10_000
MAX_INT_ARG = 1_000_000
MAX_RESULT_CHARS = 16_000_000  # size of one value: string length, or elements + string lengths
MAX_ELEMENTS = 1_000_000  # elements in one value (nested ones included)
_ELEMENT_WEIGHT = MAX_RESULT_CHARS // MAX_ELEMENTS
MAX_PRODUCED_CHARS = 64_000_000  # everything one evaluation or render may produce, summed
MAX_STEPS = 100_000  # loop iterations + calls in one evaluation or render
MAX_SECONDS = 0.8  # wall time of one evaluation or render
MAX_POWER_BITS = 4_096

_FORMAT_WIDTH = re.compile(r"[%{][^%{}]*?\d{7,}")
_LONG_DIGITS = re.compile(r"\d{7,}")
DICT_ATTRS = frozenset(dir(dict))  # a dict key of these names loses to the method

# Jinja's Undefined class once sandbox.py is imported (it sets this): a value can hold one only
# after Jinja has made it, so before that nothing is an instance of the empty tuple.
UNDEFINED_TYPES: tuple[type, ...] = ()


class SandboxRefused(Exception):
    """An operation the sandbox will not do (too big, too long, not allowed)."""


# -- the budget of one evaluation or render -------------------------------------------------------


@dataclass
class Budget:
    """What one evaluation or render may still use: its deadline, steps and produced characters."""

    deadline: float
    steps: int = MAX_STEPS
    produced: int = MAX_PRODUCED_CHARS


BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "runner_sandbox_budget", default=None
)


def tick() -> None:
    budget = BUDGET.get()
    if budget is None:
        return
    budget.steps -= 1
    if budget.steps < 0:
        raise SandboxRefused(f"over the limit of {MAX_STEPS} loop iterations and calls")
    if budget.steps & 63 == 0 and time.monotonic() > budget.deadline:
        raise SandboxRefused(f"took longer than the limit of {MAX_SECONDS:g} s")


def _produced(size: int) -> None:
    budget = BUDGET.get()
    if budget is None:
        return
    budget.produced -= size
    if budget.produced < 0:
        raise SandboxRefused(f"produced more than the limit of {MAX_PRODUCED_CHARS} characters")


# -- sizes ----------------------------------------------------------------------------------------


def measure(value: object, cap: int = MAX_RESULT_CHARS) -> int:
    """Approximate size of ``value`` once serialised, in characters.

    Strings count their length and every container element counts ``_ELEMENT_WEIGHT`` (so the
    limit allows at most ``MAX_ELEMENTS`` elements). Shared references count every time
    (serialising expands them); the walk stops past ``cap``, so measuring costs at most
    ``MAX_ELEMENTS`` steps.
    """
    if isinstance(value, (str, bytes)):
        return len(value)
    if not isinstance(value, (list, tuple, dict, set, frozenset)):
        return _ELEMENT_WEIGHT
    total = 0
    stack: list[object] = [value]
    while stack and total <= cap:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, dict):
            total += (2 * len(item) + 1) * _ELEMENT_WEIGHT
            if total <= cap:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += (len(item) + 1) * _ELEMENT_WEIGHT
            if total <= cap:
                stack.extend(item)
        elif isinstance(item, UNDEFINED_TYPES):  # e.g. map(attribute='__class__')
            raise SandboxRefused("a value holds an undefined (missing or unsafe) attribute")
        else:
            total += _ELEMENT_WEIGHT
    return total


def check_size(value: object) -> None:
    size = measure(value)
    if size > MAX_RESULT_CHARS:
        raise SandboxRefused(f"a value of over {MAX_RESULT_CHARS} characters or elements")
    if isinstance(value, (str, bytes, list, tuple, dict)):
        _produced(size)


def check_args(args: Iterable[Any], kwargs: Mapping[str, Any], *, formatting: bool = False) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARG:
            raise SandboxRefused(f"argument {a} is over the limit of {MAX_INT_ARG}")
        if formatting and isinstance(a, str) and _LONG_DIGITS.search(a):
            raise SandboxRefused("a format width over the limit")
        if isinstance(a, (list, tuple, dict, set)) and measure(a) > MAX_RESULT_CHARS:
            raise SandboxRefused(f"an argument of over {MAX_RESULT_CHARS} elements")


def check_format(template: object, args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
    if isinstance(template, str) and _FORMAT_WIDTH.search(template):
        raise SandboxRefused("a format width over the limit")
    check_args(args, kwargs, formatting=True)


# str -> str filters whose result may be longer than their input, by at most this factor:
# percent-encoding a 4-byte character gives 12, an HTML entity 5, a case change 3 (a ligature).
_GROWTH = {
    "do_urlencode": 12,
    "escape": 5,
    "do_forceescape": 5,
    "do_xmlattr": 6,
    "do_urlize": 10,
    "do_upper": 3,
    "do_lower": 3,
    "do_title": 3,
    "do_capitalize": 3,
    "upper": 3,
    "lower": 3,
    "title": 3,
    "capitalize": 3,
    "swapcase": 3,
    "casefold": 3,
}
_SPLITS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def estimate(name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """Size of a result before making it, for the operations that multiply their input (the
    result is measured after as well: this keeps the making itself bounded)."""
    if name == "do_tojson":
        indent = args[0] if args else kwargs.get("indent")
        return measure(value) + _json_lines(value) * (indent if isinstance(indent, int) else 0)
    if name == "do_join" and isinstance(value, (list, tuple, dict, str, range)):
        sep = args[0] if args else kwargs.get("d", "")
        return measure(value) + len(value) * (len(sep) if isinstance(sep, str) else 0)
    if name == "do_slice" and args and isinstance(args[0], int):
        return measure(value) + args[0] * _ELEMENT_WEIGHT
    if name in ("do_format", "format", "format_map", "%"):
        return _format_size(value, args, kwargs)
    if not isinstance(value, str):
        return measure(value) * _GROWTH[name] if name in _GROWTH else 0
    if name in _GROWTH:
        return len(value) * _GROWTH[name]
    if name in ("replace", "do_replace") and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            count = value.count(old) if old else len(value) + 1
            return len(value) + count * len(new)
    if name in ("do_indent", "indent"):
        width = args[0] if args else kwargs.get("width", 4)
        width = len(width) if isinstance(width, str) else width
        if isinstance(width, int):
            return len(value) + (value.count("\n") + 1) * width
    if name == "do_wordwrap":
        width = args[0] if args else kwargs.get("width", 79)
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring") or "\n"
        if isinstance(width, int) and isinstance(wrap, str):
            return len(value) + (len(value) // max(width, 1) + 1) * len(wrap)
    if name == "join" and args and isinstance(args[0], (list, tuple, range)):
        return len(value) * len(args[0]) + measure(args[0])
    if name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        return len(value) * max(longest, 1)
    if name in ("split", "rsplit"):
        sep = args[0] if args else kwargs.get("sep")
        parts = value.count(sep) + 1 if isinstance(sep, str) and sep else len(value) // 2 + 1
        return len(value) + parts * _ELEMENT_WEIGHT
    if name == "splitlines":
        return len(value) + (sum(value.count(c) for c in _SPLITS) + 1) * _ELEMENT_WEIGHT
    if name in ("do_list", "list"):
        return len(value) * _ELEMENT_WEIGHT
    return 0


def _json_lines(value: object) -> int:
    """Lines of ``value`` serialised with an indent, times its depth: what indenting adds,
    in units of the indent (the walk stops past the result limit)."""
    total = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack and total <= MAX_RESULT_CHARS:
        item, depth = stack.pop()
        if isinstance(item, dict):
            total += (len(item) + 1) * depth
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            total += (len(item) + 1) * depth
            stack.extend((v, depth + 1) for v in item)
    return total


_NUMBERS = re.compile(r"\d+")


def _format_size(template: object, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """A bound on a format's result: the template, every width and precision it names (each
    spec may pad to its number), every integer argument (a `*` width), and the arguments."""
    if not isinstance(template, str):
        return 0
    values = [*args, *kwargs.values()]
    if len(values) == 1 and isinstance(values[0], (tuple, dict)):  # `'%s %s' % (a, b)`
        inner = values[0]
        values = list(inner.values() if isinstance(inner, dict) else inner)
    size = len(template) + sum(int(n) for n in _NUMBERS.findall(template))
    for v in values:
        size += abs(v) if isinstance(v, int) and not isinstance(v, bool) else 0
        size += measure(v) * 2  # repr() of a value: quotes and escapes
    return size


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a filter: bounded arguments, estimated and measured results, one budget step."""
    name = getattr(fn, "__name__", "")
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        tick()
        value, rest = (args[skip], args[skip + 1 :]) if len(args) > skip else (None, ())
        if name == "do_join" and isinstance(value, Iterator):
            value = list(
                loop_budgeted(value)
            )  # read under the budget, so its size can be estimated
            args = (*args[:skip], value, *rest)
        if name in ("do_format", "format"):
            check_format(value, rest, kwargs)
        else:
            check_args(rest, kwargs)
        if isinstance(value, (list, tuple, dict, set)):
            check_size(value)
        if estimate(name, value, rest, kwargs) > MAX_RESULT_CHARS:
            raise SandboxRefused(f"'{name.removeprefix('do_')}' result would be too large")
        result = fn(*args, **kwargs)
        check_size(result)
        return result

    return guarded


def loop_budgeted(value: Any) -> Iterator[Any]:
    """Every ``{% for %}`` iterates through this: each element costs one budget step."""
    for item in value:
        tick()
        yield item
