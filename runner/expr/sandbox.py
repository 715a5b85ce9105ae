"""The hardened Jinja environment and its limits: the whole sandbox, in one file.

Every expression and template runs in ``HardenedEnvironment``: Jinja's immutable sandbox, with
StrictUndefined, no globals but a bounded ``range``, every filter wrapped by ``guard`` (bounded
arguments, results estimated before they are made and measured after), every loop and text join
rewritten to go through the budget, and arithmetic that multiplies its input checked first. A
``Budget`` (loop iterations + calls, produced characters, wall time) bounds one evaluation or
render, so nothing a pipeline or its data says can take unbounded time or memory.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from .lookup import FORBIDDEN_NAMES as FORBIDDEN_NAMES
from .lookup import MAX_EXPRESSION_CHARS as MAX_EXPRESSION_CHARS
from .lookup import MAX_NESTING as MAX_NESTING
from .lookup import forbidden as forbidden
from .lookup import too_deep as too_deep

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
_DICT_ATTRS = frozenset(dir(dict))
_MACRO_WEIGHT = 8
_LOOP_FILTER = "_runner_loop"
_SIZED_FILTER = "_runner_sized"


class SandboxRefused(Exception):
    """An operation the sandbox will not do (too big, too long, not allowed)."""


# -- the budget of one evaluation or render -------------------------------------------------------


@dataclass
class Budget:
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


def _measure(value: object, cap: int = MAX_RESULT_CHARS) -> int:
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
        elif isinstance(item, jinja2.Undefined):  # e.g. map(attribute='__class__')
            raise SandboxRefused("a value holds an undefined (missing or unsafe) attribute")
        else:
            total += _ELEMENT_WEIGHT
    return total


def check_size(value: object) -> None:
    size = _measure(value)
    if size > MAX_RESULT_CHARS:
        raise SandboxRefused(f"a value of over {MAX_RESULT_CHARS} characters or elements")
    if isinstance(value, (str, bytes, list, tuple, dict)):
        _produced(size)


def _check_args(
    args: Iterable[Any], kwargs: Mapping[str, Any], *, formatting: bool = False
) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARG:
            raise SandboxRefused(f"argument {a} is over the limit of {MAX_INT_ARG}")
        if formatting and isinstance(a, str) and _LONG_DIGITS.search(a):
            raise SandboxRefused("a format width over the limit")
        if isinstance(a, (list, tuple, dict, set)) and _measure(a) > MAX_RESULT_CHARS:
            raise SandboxRefused(f"an argument of over {MAX_RESULT_CHARS} elements")


def _check_format(template: object, args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
    if isinstance(template, str) and _FORMAT_WIDTH.search(template):
        raise SandboxRefused("a format width over the limit")
    _check_args(args, kwargs, formatting=True)


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


def _estimate(name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """Size of a result before making it, for the operations that multiply their input (the
    result is measured after as well: this keeps the making itself bounded)."""
    if name == "do_tojson":
        indent = args[0] if args else kwargs.get("indent")
        return _measure(value) + _json_lines(value) * (indent if isinstance(indent, int) else 0)
    if name == "do_join" and isinstance(value, (list, tuple, dict, str, range)):
        sep = args[0] if args else kwargs.get("d", "")
        return _measure(value) + len(value) * (len(sep) if isinstance(sep, str) else 0)
    if name == "do_slice" and args and isinstance(args[0], int):
        return _measure(value) + args[0] * _ELEMENT_WEIGHT
    if name in ("do_format", "format", "format_map", "%"):
        return _format_size(value, args, kwargs)
    if not isinstance(value, str):
        return _measure(value) * _GROWTH[name] if name in _GROWTH else 0
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
        return len(value) * len(args[0]) + _measure(args[0])
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
        size += _measure(v) * 2  # repr() of a value: quotes and escapes
    return size


_REFUSED_METHODS = frozenset({"expandtabs"})  # no use in a pipeline, multiplies its input


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a filter: bounded arguments, estimated and measured results, one budget step."""
    name = getattr(fn, "__name__", "")
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        tick()
        value, rest = (args[skip], args[skip + 1 :]) if len(args) > skip else (None, ())
        if name == "do_join" and isinstance(value, Iterator):
            value = list(_loop(value))  # read under the budget, so its size can be estimated
            args = (*args[:skip], value, *rest)
        if name in ("do_format", "format"):
            _check_format(value, rest, kwargs)
        else:
            _check_args(rest, kwargs)
        if isinstance(value, (list, tuple, dict, set)):
            check_size(value)
        if _estimate(name, value, rest, kwargs) > MAX_RESULT_CHARS:
            raise SandboxRefused(f"'{name.removeprefix('do_')}' result would be too large")
        result = fn(*args, **kwargs)
        check_size(result)
        return result

    return guarded


def _loop(value: Any) -> Iterator[Any]:
    """Every ``{% for %}`` iterates through this: each element costs one budget step."""
    for item in value:
        tick()
        yield item


def _sized(value: Any) -> Any:
    """Every value turned into text (``~``, ``{{ }}``) is measured first."""
    check_size(value)
    return value


def bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SandboxRefused(f"range of {len(r)} elements is over the limit of {MAX_RANGE}")
    return r


class _Harden(NodeTransformer):
    """Rewrites a parsed template so loops, text joins and outputs go through the guards."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [_wrap_sized(n) for n in node.nodes]
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [
            n if isinstance(n, nodes.TemplateData) else _wrap_sized(n) for n in node.nodes
        ]
        return node

    def visit_Name(self, node: nodes.Name) -> nodes.Node:
        if forbidden(node.name):
            raise jinja2.TemplateSyntaxError(
                f"'{node.name}' is not available in the sandbox", node.lineno
            )
        return node


def _wrap_sized(node: nodes.Expr) -> nodes.Expr:
    return nodes.Filter(node, _SIZED_FILTER, [], [], None, None, lineno=node.lineno)


class HardenedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with operand limits and a budget (Jinja's own sandbox bounds range() only)."""

    intercepted_binops = frozenset(["**", "*", "+", "//", "%"])

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("undefined", jinja2.StrictUndefined)
        kwargs.setdefault("autoescape", False)
        kwargs.setdefault("keep_trailing_newline", True)
        # Jinja's optimizer folds constant parts at compile time: it would run filters outside
        # any budget, and it writes a folded NaN or infinity as `nan`, a name that is not defined.
        kwargs["optimized"] = False
        super().__init__(**kwargs)
        self.globals.clear()
        self.globals["range"] = bounded_range
        self.filters = {name: guard(fn) for name, fn in self.filters.items()}
        self.filters[_LOOP_FILTER] = _loop
        self.filters[_SIZED_FILTER] = _sized
        self.tests = dict(self.tests)

    def _generate(
        self,
        source: nodes.Template,
        name: str | None,
        filename: str | None,
        defer_init: bool = False,
    ) -> str:
        # Every template and expression is compiled through here, already parsed.
        source = _Harden().visit(source)
        return super()._generate(source, name, filename, defer_init)

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Data is mostly dicts: look the key up directly instead of failing getattr() first.
        # Unlike jinja, a key wins over a dict method: `params.items` is the param named items.
        if type(obj) is dict and (attribute in obj or attribute not in _DICT_ATTRS):
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        tick()
        if operator == "**":
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                lbits = abs(left).bit_length() if isinstance(left, int) else 64
                if right > 0 and lbits * float(right) > MAX_POWER_BITS:
                    raise SandboxRefused("power result would be too large")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if (
                    isinstance(seq, (str, list, tuple))
                    and isinstance(n, int)
                    and _measure(seq) * n > MAX_RESULT_CHARS
                ):
                    raise SandboxRefused("repetition result would be too large")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > MAX_POWER_BITS
            ):
                raise SandboxRefused("product would be too large")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right if isinstance(right, tuple) else (right,), {})
            if _estimate("%", left, (right,), {}) > MAX_RESULT_CHARS:
                raise SandboxRefused("format result would be too large")
        elif operator == "+" and _measure(left) + _measure(right) > MAX_RESULT_CHARS:
            raise SandboxRefused("sum would be too large")
        result = super().call_binop(context, operator, left, right)
        check_size(result)
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # A macro call renders a whole body: it costs more of the budget than a builtin call.
        for _ in range(_MACRO_WEIGHT if isinstance(__obj, jinja2.runtime.Macro) else 1):
            tick()
        target = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(target, "__self__", None)
        method = getattr(target, "__name__", "")
        if isinstance(owner, str):
            if method in _REFUSED_METHODS:
                raise SandboxRefused(f"str.{method} is not available in the sandbox")
            if method in ("format", "format_map"):
                _check_format(owner, args, kwargs)
            if method == "join" and args and isinstance(args[0], Iterator):
                args = (list(_loop(args[0])), *args[1:])  # read under the budget, then sized
            if _estimate(method, owner, args, kwargs) > MAX_RESULT_CHARS:
                raise SandboxRefused(f"'{method}' result would be too large")
        _check_args(args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        check_size(result)
        return result


_ENV: HardenedEnvironment | None = None


def environment() -> HardenedEnvironment:
    """The shared expression environment (a parser-and-compiler cache; it holds no run state)."""
    global _ENV
    if _ENV is None:
        _ENV = HardenedEnvironment()
    return _ENV
