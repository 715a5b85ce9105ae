"""One expression language for ``${{ }}``, ``when``, ``check`` and templates.

Jinja2 expressions, compiled once when the pipeline compiles and evaluated in a hardened
ImmutableSandboxedEnvironment: StrictUndefined, no globals but a bounded ``range``, and every
evaluation or render runs under a budget (loop iterations + calls, produced characters, wall
time) so nothing a pipeline or its data says can take unbounded time or memory. Values that come
from data (an LLM reply, a document) are only ever passed in as variables, never compiled.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import math
import os
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from ._exprshape import PLACEHOLDER_INT as _PLACEHOLDER_INT
from ._exprshape import PLACEHOLDER_TEXT as _PLACEHOLDER_TEXT
from ._exprshape import Placeholder, Shape
from ._exprshape import instantiate as instantiate_shape
from ._exprshape import split as split_shape
from .errors import ExpressionError, InvalidPipeline, Location, TemplateError
from .paths import inside

MAX_EXPRESSION_CHARS = 20_000
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
MAX_NESTING = 200
FORBIDDEN_NAMES = frozenset({"self"})

_REF = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
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
class _Budget:
    deadline: float
    steps: int = MAX_STEPS
    produced: int = MAX_PRODUCED_CHARS


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "runner_sandbox_budget", default=None
)


def _tick() -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.steps -= 1
    if budget.steps < 0:
        raise SandboxRefused(f"over the limit of {MAX_STEPS} loop iterations and calls")
    if budget.steps & 63 == 0 and time.monotonic() > budget.deadline:
        raise SandboxRefused(f"took longer than the limit of {MAX_SECONDS:g} s")


def _produced(size: int) -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.produced -= size
    if budget.produced < 0:
        raise SandboxRefused(f"produced more than the limit of {MAX_PRODUCED_CHARS} characters")


class _Budgeted:
    """Runs a block under a fresh budget (nested blocks share the outer one)."""

    def __init__(self, seconds: float = MAX_SECONDS) -> None:
        self.seconds = seconds
        self.token: contextvars.Token[_Budget | None] | None = None

    def __enter__(self) -> None:
        if _BUDGET.get() is None:
            self.token = _BUDGET.set(_Budget(time.monotonic() + self.seconds))

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            _BUDGET.reset(self.token)


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


def _check_size(value: object) -> None:
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


def _estimate(name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """Size of a result before making it, for the operations that multiply their input."""
    if not isinstance(value, str):
        return 0
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
    if name == "join" and args and isinstance(args[0], (list, tuple)):
        return len(value) * len(args[0]) + _measure(args[0])
    return 0


_REFUSED_METHODS = frozenset({"expandtabs"})  # no use in a pipeline, multiplies its input


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a filter: bounded arguments, estimated and measured results, one budget step."""
    name = getattr(fn, "__name__", "")
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        value, rest = (args[skip], args[skip + 1 :]) if len(args) > skip else (None, ())
        if name in ("do_format", "format"):
            _check_format(value, rest, kwargs)
        else:
            _check_args(rest, kwargs)
        if isinstance(value, (list, tuple, dict, set)):
            _check_size(value)
        if _estimate(name, value, rest, kwargs) > MAX_RESULT_CHARS:
            raise SandboxRefused(f"'{name.removeprefix('do_')}' result would be too large")
        result = fn(*args, **kwargs)
        _check_size(result)
        return result

    return guarded


def _loop(value: Any) -> Iterator[Any]:
    """Every ``{% for %}`` iterates through this: each element costs one budget step."""
    for item in value:
        _tick()
        yield item


def _sized(value: Any) -> Any:
    """Every value turned into text (``~``, ``{{ }}``) is measured first."""
    _check_size(value)
    return value


def _bounded_range(*args: int) -> range:
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
        if node.name in FORBIDDEN_NAMES or node.name.startswith("_runner"):
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
        super().__init__(**kwargs)
        self.globals.clear()
        self.globals["range"] = _bounded_range
        self.filters = {name: _guard(fn) for name, fn in self.filters.items()}
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
        _tick()
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
        elif operator == "+" and _measure(left) + _measure(right) > MAX_RESULT_CHARS:
            raise SandboxRefused("sum would be too large")
        result = super().call_binop(context, operator, left, right)
        _check_size(result)
        return result

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # A macro call renders a whole body: it costs more of the budget than a builtin call.
        for _ in range(_MACRO_WEIGHT if isinstance(__obj, jinja2.runtime.Macro) else 1):
            _tick()
        target = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(target, "__self__", None)
        method = getattr(target, "__name__", "")
        if isinstance(owner, str):
            if method in _REFUSED_METHODS:
                raise SandboxRefused(f"str.{method} is not available in the sandbox")
            if method in ("format", "format_map"):
                _check_format(owner, args, kwargs)
            if _estimate(method, owner, args, kwargs) > MAX_RESULT_CHARS:
                raise SandboxRefused(f"'{method}' result would be too large")
        _check_args(args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        _check_size(result)
        return result


_ENV: HardenedEnvironment | None = None


def environment() -> HardenedEnvironment:
    """The shared expression environment (a parser-and-compiler cache; it holds no run state)."""
    global _ENV
    if _ENV is None:
        _ENV = HardenedEnvironment()
    return _ENV


@dataclass(frozen=True)
class Reference:
    """A name an expression reads: ``params.title`` -> ("params", "title")."""

    root: str
    attr: str | None


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_LOOKUP = re.compile(
    rf"^\s*{_NAME}(?:\s*(?:\.{_NAME}|\[\s*(?:\d+|{_NAME}|'[^'\\]*'|\"[^\"\\]*\")\s*\]))*\s*$"
)


@dataclass
class Expression:
    """A compiled expression; ``refs`` are the names it reads, found at compile time.

    ``tree`` is the parsed Jinja node (read by linters, never evaluated directly).
    """

    source: str
    where: Location | None
    refs: frozenset[Reference]
    _fn: _Lazy = field(repr=False)

    @property
    def tree(self) -> nodes.Expr | None:
        return self._fn.expr

    def _run(self, context: Mapping[str, Any]) -> Any:
        # What jinja's TemplateExpression.__call__ does, minus copying the globals ChainMap
        # into every call (half the cost of a small `when`).
        template, render = self._fn.render
        ctx = template.new_context({"range": _bounded_range, **context}, shared=True)
        for _ in render(ctx):
            pass
        return ctx.vars["result"]

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """Evaluate under a fresh budget. Raises ExpressionError (refused, undefined, bad type)."""
        token = _BUDGET.set(_Budget(time.monotonic() + MAX_SECONDS))
        try:
            value = self._run(context)
            if isinstance(value, jinja2.Undefined):
                raise ExpressionError(f"'{_clip(self.source)}' is undefined", where=self.where)
            # A plain lookup (`steps.read.output.data.shots`) hands over data that already
            # exists, however large; only values an expression produces are bounded.
            if not _LOOKUP.match(self.source):
                _check_size(value)
        except SandboxRefused as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.exceptions.SecurityError as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.UndefinedError as exc:
            raise ExpressionError(
                f"in '{_clip(self.source)}': {exc.message}", where=self.where
            ) from None
        except RecursionError:
            raise ExpressionError(
                "expression refused: nesting too deep", where=self.where
            ) from None
        except (
            TypeError,
            ValueError,
            ZeroDivisionError,
            AttributeError,
            KeyError,
            IndexError,
            OverflowError,
            MemoryError,
        ) as exc:
            raise ExpressionError(
                f"in '{_clip(self.source)}': {type(exc).__name__}: {exc}", where=self.where
            ) from None
        finally:
            _BUDGET.reset(token)
        return value


def _check_size_or_raise(value: object, where: Location | None) -> None:
    try:
        _check_size(value)
    except SandboxRefused as exc:
        raise ExpressionError(f"expression refused: {exc}", where=where) from None


def _clip(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _refs(tree: nodes.Node) -> frozenset[Reference]:
    found: set[Reference] = set()
    attrs: set[int] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        inner = getattr(node, "node", None)
        if isinstance(inner, nodes.Name) and inner.ctx == "load":
            attr: str | None = None
            if isinstance(node, nodes.Getattr):
                attr = node.attr
            elif (
                isinstance(node, nodes.Getitem)
                and isinstance(node.arg, nodes.Const)
                and isinstance(node.arg.value, str)
            ):
                attr = node.arg.value
            found.add(Reference(inner.name, attr))
            attrs.add(id(inner))
    for name in tree.find_all(nodes.Name):
        if name.ctx == "load" and id(name) not in attrs:
            found.add(Reference(name.name, None))
    return frozenset(found)


def _too_deep(source: str) -> bool:
    """Brackets nest deeper than MAX_NESTING (counting them first: the walk is per character)."""
    if len(source) <= MAX_NESTING:  # most expressions: too short to nest that deep
        return False
    if source.count("(") + source.count("[") + source.count("{") <= MAX_NESTING:
        return False
    return _depth(source) > MAX_NESTING


def _depth(source: str) -> int:
    depth = best = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def compile_expression(source: str, where: Location | None = None) -> Expression:
    """Parse and compile one expression. Raises ExpressionError with ``where`` on bad syntax."""
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"expression of {len(source)} characters is over the limit of {MAX_EXPRESSION_CHARS}",
            where=where,
        )
    if not source.strip():
        raise ExpressionError("empty expression", where=where)
    if _too_deep(source):
        raise ExpressionError(
            f"expression refused: nesting deeper than {MAX_NESTING} brackets", where=where
        )
    try:
        refs, fn = _compile_source(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ExpressionError(
            f"invalid expression '{_clip(source)}': {exc.message}", where=where
        ) from None
    except RecursionError:
        raise ExpressionError("expression refused: nesting too deep", where=where) from None
    return Expression(source, where, refs, fn)


_Compiled = tuple[frozenset[Reference], "_Lazy"]


@functools.lru_cache(maxsize=4096)
def _compile_source(source: str) -> _Compiled:
    return _compile_by_shape(source) or _compile_parsed(source)


def _parse(source: str) -> nodes.Expr:
    parser = Parser(environment(), source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise jinja2.TemplateSyntaxError(
            f"unexpected '{parser.stream.current.value}' after the expression",
            parser.stream.current.lineno,
        )
    return expr


def _compile_parsed(source: str) -> _Compiled:
    # Parsing finds every error a pipeline author can make (syntax, unknown filter or test,
    # forbidden name); generating Python code costs ~10x more and waits for first use.
    env = environment()
    expr = _parse(source)
    holder = nodes.Output([expr], lineno=1)  # find_all skips the node it starts from
    for node in holder.find_all((nodes.Filter, nodes.Test, nodes.Name)):
        if isinstance(node, nodes.Filter) and node.name not in env.filters:
            raise jinja2.TemplateSyntaxError(f"no filter named '{node.name}'", node.lineno)
        if isinstance(node, nodes.Test) and node.name not in env.tests:
            raise jinja2.TemplateSyntaxError(f"no test named '{node.name}'", node.lineno)
        if isinstance(node, nodes.Name) and _forbidden(node.name):
            raise jinja2.TemplateSyntaxError(
                f"'{node.name}' is not available in the sandbox", node.lineno
            )
    return _refs(holder), _Lazy(expr)


def _forbidden(name: str) -> bool:
    return name in FORBIDDEN_NAMES or name.startswith("_runner")


@dataclass
class _ShapeFacts:
    """What compiling needs from a shape: its tree, references and names to check; and, built
    on the first evaluation of an instance, its shared code."""

    shape: Shape
    refs: tuple[tuple[Placeholder, Placeholder | None], ...]
    checks: tuple[tuple[str, Placeholder], ...]  # ("filter" | "test" | "name", its name)
    holders: frozenset[Placeholder] = frozenset()
    _shared: Any = field(default=None, repr=False)  # _SharedCode | False (refused) | None

    def shared_code(self) -> _SharedCode | None:
        if self._shared is None:
            self._shared = _SharedCode.build(self.shape.tree, self.holders) or False
        return self._shared or None


_SHAPES: dict[str, _ShapeFacts | None] = {}
_MAX_SHAPES = 4096


def _shape_facts(text: str, holders: tuple[Placeholder, ...]) -> _ShapeFacts | None:
    shape = Shape.build(text, holders, _parse)
    if shape is None:
        return None
    holder = nodes.Output([shape.tree], lineno=1)
    checks: list[tuple[str, Placeholder]] = []
    for node in holder.find_all((nodes.Filter, nodes.Test, nodes.Name)):
        kind = type(node).__name__.lower()
        checks.append((kind, node.name))  # type: ignore[attr-defined]
    refs = tuple((r.root, r.attr) for r in _refs(holder))
    return _ShapeFacts(shape, refs, tuple(checks), frozenset(holders))


def _compile_by_shape(source: str) -> _Compiled | None:
    """Compile an instance of an already parsed shape; None when the source must be parsed in
    full (outside the shape subset, or any error: the full parse words the message)."""
    cut = split_shape(source)
    if cut is None:
        return None
    text, holders, values = cut
    facts = _SHAPES.get(text, _MISSING)
    if facts is _MISSING:
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        facts = _SHAPES[text] = _shape_facts(text, holders)
    if not isinstance(facts, _ShapeFacts):
        return None
    mapping = dict(zip(holders, values, strict=True))
    env = environment()
    for kind, name in facts.checks:
        real = mapping.get(name, name)
        if kind == "filter":
            if real not in env.filters:
                return None
        elif kind == "test":
            if real not in env.tests:
                return None
        elif not isinstance(real, str) or _forbidden(real):
            return None
    refs = frozenset(
        _reference(mapping.get(root, root), None if attr is None else mapping.get(attr, attr))
        for root, attr in facts.refs
    )
    return refs, _Lazy(facts.shape.tree, mapping, facts if _may_share(values) else None)


_MISSING: Any = object()
_REFERENCES: dict[tuple[str, str | None], Reference] = {}


def _reference(root: str, attr: str | None) -> Reference:
    """Reference(root, attr), shared: a frozen dataclass costs ~1 µs to build, and a pipeline
    names the same few roots and step ids over and over."""
    found = _REFERENCES.get((root, attr))
    if found is None:
        if len(_REFERENCES) > 65_536:
            _REFERENCES.clear()
        found = _REFERENCES[(root, attr)] = Reference(root, attr)
    return found


class _Lazy:
    """An expression's tree and compiled template, each made on first use and then kept.

    With a ``mapping``, ``expr`` is a cached shape's tree: the instance (placeholders replaced
    by the mapping's values) is built when first read, as most are only ever evaluated; and its
    code is the shape's compiled code with the placeholder constants replaced (see
    ``_SharedCode``), when the shape allows it.
    """

    __slots__ = ("_expr", "_facts", "_mapping", "_render")

    def __init__(
        self,
        expr: nodes.Expr,
        mapping: dict[Placeholder, Any] | None = None,
        facts: _ShapeFacts | None = None,
    ) -> None:
        self._expr = expr
        self._mapping = mapping
        self._facts = facts
        self._render: tuple[jinja2.Template, Callable[..., Any]] | None = None

    @property
    def expr(self) -> nodes.Expr:
        if self._mapping is not None:
            self._expr = instantiate_shape(self._expr, self._mapping)
            self._mapping = None
        return self._expr

    @property
    def render(self) -> tuple[jinja2.Template, Callable[..., Any]]:
        """(a template to make the context with, the function that evaluates into it)."""
        if self._render is None:
            shared = None
            if self._facts is not None and self._mapping is not None:
                shared = self._facts.shared_code()
            if shared is not None and self._mapping is not None:
                self._render = shared.instance(self._mapping)
            else:
                template = _template_of(self.expr)
                self._render = (template, template.root_render_func)
        return self._render


def _template_of(expr: nodes.Expr) -> jinja2.Template:
    # Code generation rewrites the tree (guards): work on a copy, keep the original for readers
    # such as the rule linter.
    body = [nodes.Assign(nodes.Name("result", "store"), copy.deepcopy(expr), lineno=1)]
    return environment().from_string(nodes.Template(body, lineno=1))


def _may_share(values: tuple[Any, ...]) -> bool:
    """Whether an instance with these slot values may use its shape's code. Python compiles
    `0 and x` differently from `7000000000 and x` (a constant's truth value decides jumps),
    so every value must be as true as its placeholder (a non-empty string, a non-zero integer);
    and no name may be one Jinja's code generator treats specially."""
    return all(v and not (type(v) is str and v in _SPECIAL_NAMES) for v in values)


# Names Jinja's code generator treats specially (it declares `self` as a template reference;
# the rest have meanings inside loops, macros and blocks): an instance naming one is compiled
# on its own, as its code may differ from the shape's.
_SPECIAL_NAMES = frozenset({"self", "loop", "caller", "varargs", "kwargs", "super"})


class _SharedCode:
    """A shape's compiled expression, shared by its instances.

    Jinja's code generation and Python's compile() cost ~0.4 ms an expression, and a pipeline
    of a thousand steps each reading ``steps.<previous>.output.x`` has a thousand instances of
    one shape. The shape's code holds each placeholder as a constant (a name looked up, an
    attribute, a string, an integer), so an instance's code is that code with its values put
    in place of the placeholders: what compiling the instance would produce, provided nothing
    in the compilation depended on the placeholders' values. ``build`` refuses a shape whose
    code does not hold every placeholder whole, as a constant of its own (one folded into
    another constant, or quoted in a message, means a value was computed with); what remains
    is truth values deciding jumps, which ``_may_share`` keeps equal. Instances that may not
    share are compiled in full.
    """

    __slots__ = ("code", "template")

    def __init__(self, template: jinja2.Template, code: types.CodeType) -> None:
        self.template = template
        self.code = code

    @classmethod
    def build(cls, shape_tree: nodes.Expr, holders: frozenset[Placeholder]) -> _SharedCode | None:
        try:
            template = _template_of(shape_tree)
        except Exception:  # any failure: instances compile on their own and report it
            return None
        code = template.root_render_func.__code__
        seen: set[Placeholder] = set()
        if not _placeholders_whole(code, holders, seen) or seen != holders:
            return None
        return cls(template, code)

    def instance(self, mapping: dict[Placeholder, Any]) -> tuple[jinja2.Template, Any]:
        root = self.template.root_render_func
        code = _substituted(self.code, mapping)
        fn = types.FunctionType(
            code, root.__globals__, root.__name__, root.__defaults__, root.__closure__
        )
        return self.template, fn


def _placeholders_whole(
    code: types.CodeType, holders: frozenset[Placeholder], seen: set[Placeholder]
) -> bool:
    """Every placeholder constant of ``code`` (and its nested code) is one of ``holders``, whole;
    the ones found are added to ``seen``."""
    stack: list[Any] = list(code.co_consts)
    while stack:
        const = stack.pop()
        if isinstance(const, types.CodeType):
            stack.extend(const.co_consts)
        elif type(const) is tuple or type(const) is frozenset:
            stack.extend(const)  # a literal list, or a set made for an `in` test
        elif type(const) is str:
            if const in holders:
                seen.add(const)
            elif _PLACEHOLDER_TEXT in const:
                return False  # a placeholder inside a larger string: folded, or in a message
        elif type(const) is int and abs(const) >= _PLACEHOLDER_INT:
            if const not in holders:
                return False  # arithmetic on placeholders, folded
            seen.add(const)
    return True


def _substituted(code: types.CodeType, mapping: dict[Placeholder, Any]) -> types.CodeType:
    return code.replace(co_consts=tuple(_put(c, mapping) for c in code.co_consts))


def _put(const: Any, mapping: dict[Placeholder, Any]) -> Any:
    if isinstance(const, types.CodeType):
        return _substituted(const, mapping)
    if type(const) is tuple:
        return tuple(_put(c, mapping) for c in const)
    if type(const) is frozenset:
        return frozenset(_put(c, mapping) for c in const)
    if (type(const) is str or type(const) is int) and const in mapping:
        return mapping[const]
    return const


# -- values with ${{ }} inside ------------------------------------------------------------------


@dataclass
class Interpolation:
    """A string with ``${{ }}`` parts: rendered to text."""

    parts: list[str | Expression]

    def evaluate(self, context: Mapping[str, Any]) -> str:
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            else:
                out.append(_to_text(p.evaluate(context)))
        return "".join(out)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(value)
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


Compiled = Any  # a literal, an Expression, an Interpolation, or dict/list of those


def has_expression(text: str) -> bool:
    return "${{" in text


def compile_value(
    value: Any, where_of: Callable[[tuple[Any, ...]], Location | None], path: tuple[Any, ...] = ()
) -> Compiled:
    """Compile every ``${{ }}`` inside a YAML value; ``where_of(path)`` locates a sub-value."""
    if isinstance(value, str):
        if "${{" not in value:
            return value
        where = where_of(path)
        matches = list(_REF.finditer(value))
        if not matches or value.count("${{") != len(matches):
            raise ExpressionError(f"unterminated '${{{{' in '{_clip(value)}'", where=where)
        if len(matches) == 1 and matches[0].span() == (0, len(value)):
            return compile_expression(matches[0].group(1).strip(), where)
        parts: list[str | Expression] = []
        pos = 0
        for m in matches:
            if m.start() > pos:
                parts.append(value[pos : m.start()])
            parts.append(compile_expression(m.group(1).strip(), where))
            pos = m.end()
        if pos < len(value):
            parts.append(value[pos:])
        return Interpolation(parts)
    if isinstance(value, dict):
        return {k: compile_value(v, where_of, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [compile_value(v, where_of, (*path, i)) for i, v in enumerate(value)]
    return value


def evaluate_value(compiled: Compiled, context: Mapping[str, Any]) -> Any:
    if isinstance(compiled, (Expression, Interpolation)):
        return compiled.evaluate(context)
    if isinstance(compiled, dict):
        return {k: evaluate_value(v, context) for k, v in compiled.items()}
    if isinstance(compiled, list):
        return [evaluate_value(v, context) for v in compiled]
    return compiled


def iter_expressions(compiled: Compiled) -> Iterator[Expression]:
    if isinstance(compiled, Expression):
        yield compiled
    elif isinstance(compiled, Interpolation):
        yield from (p for p in compiled.parts if isinstance(p, Expression))
    elif isinstance(compiled, dict):
        for v in compiled.values():
            yield from iter_expressions(v)
    elif isinstance(compiled, list):
        for v in compiled:
            yield from iter_expressions(v)


def is_static(compiled: Compiled) -> bool:
    return next(iter_expressions(compiled), None) is None


# -- templates -----------------------------------------------------------------------------------


class _RootLoader(jinja2.BaseLoader):
    """Loads templates from the pipeline root only.

    ``..`` walks, absolute paths and symlinks that point out are refused (not merely "not
    found"), and so are templates over the size limit.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        try:
            path = inside(self.root, template)
        except InvalidPipeline as exc:
            raise SandboxRefused(f"template '{template}': {exc.message}") from None
        if not path.is_file():
            raise jinja2.TemplateNotFound(template)
        stat = path.stat()
        if stat.st_size > MAX_TEMPLATE_CHARS:
            raise SandboxRefused(
                f"template '{template}' is over the limit of {MAX_TEMPLATE_CHARS} bytes"
            )
        text = path.read_text(encoding="utf-8")
        if _too_deep(text):
            raise SandboxRefused(f"template '{template}' nests deeper than {MAX_NESTING}")

        def uptodate() -> bool:
            try:
                return os.stat(path).st_mtime_ns == stat.st_mtime_ns
            except OSError:
                return False

        return text, str(path), uptodate


def template_environment(
    root: Path, filters: Mapping[str, Callable[..., Any]] | None = None
) -> HardenedEnvironment:
    """A template environment whose loader reads only inside ``root``; ``filters`` are guarded."""
    env = HardenedEnvironment(loader=_RootLoader(root))
    for name, fn in (filters or {}).items():
        env.filters[name] = _guard(fn)
    return env


def render_template(
    env: HardenedEnvironment,
    *,
    name: str | None = None,
    text: str | None = None,
    variables: Mapping[str, Any],
    where: Location | None = None,
    seconds: float = MAX_SECONDS,
) -> str:
    """Render a template file (by name under the root) or inline text, under a budget.

    Raises TemplateError: not found, syntax, undefined variable, or refused by the sandbox
    (path outside the root, too many loop iterations or calls, too long, too large).
    """
    label = name or "<inline>"
    token: contextvars.Token[_Budget | None] | None = None
    try:
        if text is not None and (len(text) > MAX_TEMPLATE_CHARS or _too_deep(text)):
            raise SandboxRefused(
                f"inline template over {MAX_TEMPLATE_CHARS} characters or {MAX_NESTING} levels"
            )
        tmpl = env.get_template(name) if name is not None else env.from_string(text or "")
        # The budget starts after compiling: parse time of a large template is not an attack.
        token = _BUDGET.set(_Budget(time.monotonic() + seconds))
        chunks: list[str] = []
        total = 0
        for chunk in tmpl.generate(**variables):
            total += len(chunk)
            if total > MAX_RESULT_CHARS:
                raise SandboxRefused(f"output over the limit of {MAX_RESULT_CHARS} characters")
            chunks.append(chunk)
        out = "".join(chunks)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template not found: {exc.name}", where=where) from None
    except jinja2.TemplateSyntaxError as exc:
        loc = Location(exc.filename or label, exc.lineno or 0, 1)
        raise TemplateError(f"template syntax error: {exc.message}", where=loc) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            f"template {label}: {exc.message}",
            where=where,
            hint="pass it in `vars:` (templates see only what they are given)",
        ) from None
    except (SandboxRefused, jinja2.exceptions.SecurityError) as exc:
        raise TemplateError(f"template {label} refused: {exc}", where=where) from None
    except RecursionError:
        raise TemplateError(f"template {label} refused: nesting too deep", where=where) from None
    except (
        TypeError,
        ValueError,
        ZeroDivisionError,
        OverflowError,
        AttributeError,
        KeyError,
        IndexError,
        MemoryError,
        jinja2.TemplateError,
    ) as exc:
        raise TemplateError(f"template {label}: {type(exc).__name__}: {exc}", where=where) from None
    finally:
        if token is not None:
            _BUDGET.reset(token)
    return out


def template_variables(env: HardenedEnvironment, source: str) -> set[str]:
    """Names a template reads (for compile-time checks of `vars:`)."""
    from jinja2 import meta

    return set(meta.find_undeclared_variables(env.parse(source)))
