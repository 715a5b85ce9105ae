"""Sharing compiled shapes: an expression of a shape already compiled costs a dict lookup.

A pipeline of a thousand steps each reading ``steps.<previous>.output.x`` holds a thousand
instances of one shape (see ``shapes``). The shape is parsed and checked once (``compile_by_shape``)
and, when first evaluated, compiled to Python once (``_SharedCode``); an instance gets the
shape's tree and code with its own names and constants put in.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2
from jinja2 import nodes

from .lookup import SPECIAL_NAMES as SPECIAL_NAMES
from .parsing import Reference, parse, reference, refs_of
from .sandbox import environment, forbidden
from .shapes import PLACEHOLDER_INT as _PLACEHOLDER_INT
from .shapes import PLACEHOLDER_TEXT as _PLACEHOLDER_TEXT
from .shapes import Placeholder, Shape
from .shapes import instantiate as instantiate_shape
from .shapes import split as split_shape

# What compiling an expression gives: the names it reads, and its lazily built tree and code.
CompiledSource = tuple[frozenset[Reference], "Lazy"]


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
    shape = Shape.build(text, holders, parse)
    if shape is None:
        return None
    holder = nodes.Output([shape.tree], lineno=1)
    checks: list[tuple[str, Placeholder]] = []
    for node in holder.find_all((nodes.Filter, nodes.Test, nodes.Name)):
        kind = type(node).__name__.lower()
        checks.append((kind, node.name))  # type: ignore[attr-defined]
    refs = tuple((r.root, r.attr) for r in refs_of(holder))
    return _ShapeFacts(shape, refs, tuple(checks), frozenset(holders))


def compile_by_shape(source: str) -> CompiledSource | None:
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
        elif not isinstance(real, str) or forbidden(real):
            return None
    refs = frozenset(
        reference(mapping.get(root, root), None if attr is None else mapping.get(attr, attr))
        for root, attr in facts.refs
    )
    return refs, Lazy(facts.shape.tree, mapping, facts if _may_share(values) else None)


_MISSING: Any = object()


class Lazy:
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
    return all(v and not (type(v) is str and v in SPECIAL_NAMES) for v in values)


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
