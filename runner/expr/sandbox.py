"""The hardened Jinja environment and its limits: the whole sandbox, in one file.

Every expression and template runs in ``HardenedEnvironment``: Jinja's immutable sandbox, with
StrictUndefined, no globals but a bounded ``range``, every filter wrapped by ``guard`` (bounded
arguments, results estimated before they are made and measured after), every loop and text join
rewritten to go through the budget, and arithmetic that multiplies its input checked first. A
``Budget`` (loop iterations + calls, produced characters, wall time) bounds one evaluation or
render, so nothing a pipeline or its data says can take unbounded time or memory. The budget,
the limits and ``guard`` live in budget.py (no Jinja there: plain.py evaluates plain expressions
under the same guards without it) and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from . import budget as _budget
from .budget import BUDGET as BUDGET
from .budget import MAX_ELEMENTS as MAX_ELEMENTS
from .budget import MAX_INT_ARG as MAX_INT_ARG
from .budget import MAX_POWER_BITS as MAX_POWER_BITS
from .budget import MAX_PRODUCED_CHARS as MAX_PRODUCED_CHARS
from .budget import MAX_RANGE as MAX_RANGE
from .budget import MAX_RESULT_CHARS as MAX_RESULT_CHARS
from .budget import MAX_SECONDS as MAX_SECONDS
from .budget import MAX_STEPS as MAX_STEPS
from .budget import MAX_TEMPLATE_CHARS as MAX_TEMPLATE_CHARS
from .budget import Budget as Budget
from .budget import SandboxRefused as SandboxRefused
from .budget import check_args, check_format, estimate, loop_budgeted, measure
from .budget import check_size as check_size
from .budget import guard as guard
from .budget import tick as tick
from .lookup import FORBIDDEN_NAMES as FORBIDDEN_NAMES
from .lookup import MAX_EXPRESSION_CHARS as MAX_EXPRESSION_CHARS
from .lookup import MAX_NESTING as MAX_NESTING
from .lookup import forbidden as forbidden
from .lookup import too_deep as too_deep

# A value holding one of Jinja's undefined values is refused when it is measured (budget.py).
_budget.UNDEFINED_TYPES = (jinja2.Undefined,)
_DICT_ATTRS = _budget.DICT_ATTRS
_REFUSED_METHODS = frozenset({"expandtabs"})  # no use in a pipeline, multiplies its input
_MACRO_WEIGHT = 8
_LOOP_FILTER = "_runner_loop"
_SIZED_FILTER = "_runner_sized"


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
        self.filters[_LOOP_FILTER] = loop_budgeted
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
                    and measure(seq) * n > MAX_RESULT_CHARS
                ):
                    raise SandboxRefused("repetition result would be too large")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > MAX_POWER_BITS
            ):
                raise SandboxRefused("product would be too large")
        elif operator == "%" and isinstance(left, str):
            check_format(left, right if isinstance(right, tuple) else (right,), {})
            if estimate("%", left, (right,), {}) > MAX_RESULT_CHARS:
                raise SandboxRefused("format result would be too large")
        elif operator == "+" and measure(left) + measure(right) > MAX_RESULT_CHARS:
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
                check_format(owner, args, kwargs)
            if method == "join" and args and isinstance(args[0], Iterator):
                args = (
                    list(loop_budgeted(args[0])),
                    *args[1:],
                )  # read under the budget, then sized
            if estimate(method, owner, args, kwargs) > MAX_RESULT_CHARS:
                raise SandboxRefused(f"'{method}' result would be too large")
        check_args(args, kwargs)
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
