"""Plain expressions without Jinja: ``output.text | length > 0``, ``params.mode == 'fast'``.

Most expressions pipelines write beyond a dotted lookup (lookup.py) are comparisons, ``and`` /
``or`` / ``not``, literals, lookups and a few pure filters. ``parse`` accepts a conservative
subset of Jinja's grammar and builds the tree Jinja's parser would build for it (the same
nodes in the same order: ``refs`` and ``paths`` are what parsing.py finds in Jinja's tree);
``PlainTree.evaluate`` computes what the sandbox's compiled code computes, through the same
guards and under the same budget (budget.py). Both refuse rather than guess: ``parse`` returns
None for anything outside the subset (the expression is compiled by Jinja, which also words
every syntax error), and ``evaluate`` returns ``GAVE_UP`` whenever a value is not plain data or
a step would raise or be refused (the caller evaluates through Jinja, which gives the value or
words the error). So either this module's answer is Jinja's, or it does not answer.

The subset: names, ``a.b``, ``a[0]``, ``a['k']``; integers, quoted strings without escapes,
``true`` / ``false`` / ``none`` (any case Jinja knows); ``== != < <= > >=`` (chained as
Python chains them); ``and``, ``or``, ``not``, parentheses; the filters ``length`` / ``count``,
``lower``, ``upper``, ``trim``, ``default`` / ``d`` with positional arguments; the tests
``defined``, ``undefined`` and ``none`` without arguments. Jinja's precedence: a filter or test
binds tighter than a comparison, which binds tighter than ``not``, ``and``, ``or``.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .budget import DICT_ATTRS, SandboxRefused, check_size, guard
from .lookup import KEYWORDS, SPECIAL_NAMES, Reference, forbidden, reference

_TOKEN = re.compile(
    r"(?P<ws>[ \t\n]+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<int>(?:0|[1-9][0-9]*)(?![0-9A-Za-z_.]))"
    r"|(?P<str>'[^'\\\n\r{}]*'|\"[^\"\\\n\r{}]*\")"
    r"|(?P<op>==|!=|<=|>=|[<>()|.\[\],])"
)
_CONSTANTS = {"true": True, "True": True, "false": False, "False": False}
_NONE = frozenset({"none", "None"})
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# Names whose value in an expression is not the data's: `range` is the sandbox's function, and
# `result` is the name Jinja's expression template assigns.
_NOT_DATA = frozenset({"range", "result"})
_PLAIN_TYPES = frozenset({str, int, float, bool, type(None), list, dict})
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _Undefined:
    """What the sandbox's StrictUndefined stands for here: a name or key that is not there.
    Only ``default`` and the tests take one; anything else touching it gives up."""

    __slots__ = ()


UNDEFINED: Any = _Undefined()
GAVE_UP: Any = object()


class _GiveUp(Exception):
    """Jinja must answer: the value is not plain, or a step raises or is refused."""


# -- the filters, as Jinja 3.1 defines them for the values taken here ---------------------------
# Named as Jinja's functions are: guard() estimates results by the function's name.


def do_lower(s: Any) -> str:
    if type(s) is not str:
        raise _GiveUp
    return s.lower()


def do_upper(s: Any) -> str:
    if type(s) is not str:
        raise _GiveUp
    return s.upper()


def do_trim(value: Any, chars: Any = None) -> str:
    if type(value) is not str or not (chars is None or type(chars) is str):
        raise _GiveUp
    return value.strip(chars)


def do_default(value: Any, default_value: Any = "", boolean: Any = False) -> Any:
    if value is UNDEFINED or (boolean and not value):
        return default_value
    return value


_FILTERS: dict[str, Callable[..., Any]] = {
    "length": guard(len),
    "count": guard(len),
    "lower": guard(do_lower),
    "upper": guard(do_upper),
    "trim": guard(do_trim),
    "default": guard(do_default),
    "d": guard(do_default),
}
_TAKES_UNDEFINED = frozenset({"default", "d"})
_TESTS: dict[str, Callable[[Any], bool]] = {
    "defined": lambda v: v is not UNDEFINED,
    "undefined": lambda v: v is UNDEFINED,
    "none": lambda v: v is None,
}


# -- the tree: Jinja's node types, their fields in Jinja's order ----------------------------------


class Node:
    __slots__ = ()

    def children(self) -> tuple[Node, ...]:
        return ()

    def value(self, ctx: Mapping[str, Any]) -> Any:
        raise NotImplementedError


def _data(value: Any) -> Any:
    if type(value) not in _PLAIN_TYPES:
        raise _GiveUp
    return value


def _defined(value: Any) -> Any:
    if value is UNDEFINED:
        raise _GiveUp
    return value


class Const(Node):
    __slots__ = ("const",)

    def __init__(self, const: Any) -> None:
        self.const = const

    def value(self, ctx: Mapping[str, Any]) -> Any:
        return self.const


class Name(Node):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def value(self, ctx: Mapping[str, Any]) -> Any:
        if self.name in ctx:
            return _data(ctx[self.name])
        return UNDEFINED


class Getattr(Node):
    """``node.attr``: the sandbox's getattr on a dict (a key wins, a dict method gives up)."""

    __slots__ = ("attr", "node")

    def __init__(self, node: Node, attr: str) -> None:
        self.node, self.attr = node, attr

    def children(self) -> tuple[Node, ...]:
        return (self.node,)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        obj = self.node.value(ctx)
        if type(obj) is not dict:
            raise _GiveUp
        if self.attr in obj:
            return _data(obj[self.attr])
        if self.attr in DICT_ATTRS:
            raise _GiveUp
        return UNDEFINED


class Getitem(Node):
    """``node[0]`` or ``node['k']``: the sandbox's getitem on a list or a dict."""

    __slots__ = ("arg", "node")

    def __init__(self, node: Node, arg: Const) -> None:
        self.node, self.arg = node, arg

    def children(self) -> tuple[Node, ...]:
        return (self.node, self.arg)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        obj = self.node.value(ctx)
        key = self.arg.const
        if type(obj) is dict:
            if key in obj:
                return _data(obj[key])
            if type(key) is str and key in DICT_ATTRS:
                raise _GiveUp
            return UNDEFINED
        if type(obj) is list and type(key) is int:
            return _data(obj[key]) if key < len(obj) else UNDEFINED
        raise _GiveUp


class Filter(Node):
    __slots__ = ("args", "name", "node")

    def __init__(self, node: Node, name: str, args: list[Node]) -> None:
        self.node, self.name, self.args = node, name, args

    def children(self) -> tuple[Node, ...]:
        return (self.node, *self.args)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        subject = self.node.value(ctx)
        if self.name not in _TAKES_UNDEFINED:
            _defined(subject)
        args = [_defined(a.value(ctx)) for a in self.args]
        return _FILTERS[self.name](subject, *args)


class Test(Node):
    __slots__ = ("name", "node")

    def __init__(self, node: Node, name: str) -> None:
        self.node, self.name = node, name

    def children(self) -> tuple[Node, ...]:
        return (self.node,)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        return _TESTS[self.name](self.node.value(ctx))


class Not(Node):
    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def children(self) -> tuple[Node, ...]:
        return (self.node,)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        return not _defined(self.node.value(ctx))


class And(Node):
    __slots__ = ("left", "right")

    def __init__(self, left: Node, right: Node) -> None:
        self.left, self.right = left, right

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def value(self, ctx: Mapping[str, Any]) -> Any:
        left = _defined(self.left.value(ctx))
        return left and _defined(self.right.value(ctx))


class Or(And):
    __slots__ = ()

    def value(self, ctx: Mapping[str, Any]) -> Any:
        left = _defined(self.left.value(ctx))
        return left or _defined(self.right.value(ctx))


class Compare(Node):
    """``a < b <= c``: evaluated as Python chains it (a later operand only when needed)."""

    __slots__ = ("expr", "ops")

    def __init__(self, expr: Node, ops: list[tuple[str, Node]]) -> None:
        self.expr, self.ops = expr, ops

    def children(self) -> tuple[Node, ...]:
        return (self.expr, *(node for _, node in self.ops))

    def value(self, ctx: Mapping[str, Any]) -> Any:
        left = _defined(self.expr.value(ctx))
        result: Any = True
        for op, node in self.ops:
            right = _defined(node.value(ctx))
            result = _COMPARE[op](left, right)
            if not result:
                return result
            left = right
        return result


# -- parsing -------------------------------------------------------------------------------------


class _Tokens:
    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items
        self.pos = 0

    def peek(self, ahead: int = 0) -> tuple[str, str]:
        i = self.pos + ahead
        return self.items[i] if i < len(self.items) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.pos += 1
        return token

    def expect(self, kind: str, text: str | None = None) -> str:
        got_kind, got = self.take()
        if got_kind != kind or (text is not None and got != text):
            raise _GiveUp
        return got


def _tokens(source: str) -> list[tuple[str, str]] | None:
    if not source.isascii():
        return None
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            return None
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group()))
        pos = m.end()
    return out


def _parse_or(t: _Tokens) -> Node:
    node = _parse_and(t)
    while t.peek() == ("name", "or"):
        t.take()
        node = Or(node, _parse_and(t))
    return node


def _parse_and(t: _Tokens) -> Node:
    node = _parse_not(t)
    while t.peek() == ("name", "and"):
        t.take()
        node = And(node, _parse_not(t))
    return node


def _parse_not(t: _Tokens) -> Node:
    if t.peek() == ("name", "not"):
        t.take()
        return Not(_parse_not(t))
    return _parse_compare(t)


def _parse_compare(t: _Tokens) -> Node:
    expr = _parse_unary(t)
    ops: list[tuple[str, Node]] = []
    while True:
        kind, text = t.peek()
        if kind == "op" and text in _COMPARE:
            t.take()
            ops.append((text, _parse_unary(t)))
        elif kind == "name" and text in ("in", "not"):
            raise _GiveUp  # `in`, `not in`
        else:
            break
    return Compare(expr, ops) if ops else expr


def _parse_unary(t: _Tokens) -> Node:
    node = _parse_primary(t)
    while True:  # Jinja's parse_postfix
        kind, text = t.peek()
        if (kind, text) == ("op", "."):
            t.take()
            node = Getattr(node, t.expect("name"))
        elif (kind, text) == ("op", "["):
            t.take()
            node = Getitem(node, _literal(t))
            t.expect("op", "]")
        else:
            break
    while True:  # Jinja's parse_filter_expr
        kind, text = t.peek()
        if (kind, text) == ("op", "|"):
            t.take()
            node = _parse_filter(t, node)
        elif (kind, text) == ("name", "is"):
            t.take()
            node = _parse_test(t, node)
        else:
            break
    return node


def _literal(t: _Tokens) -> Const:
    kind, text = t.take()
    if kind == "int":
        return Const(int(text))
    if kind == "str":
        return Const(text[1:-1])
    raise _GiveUp


def _parse_primary(t: _Tokens) -> Node:
    kind, text = t.peek()
    if kind == "name":
        t.take()
        if text in _CONSTANTS:
            return Const(_CONSTANTS[text])
        if text in _NONE:
            return Const(None)
        if text in KEYWORDS or text in _NOT_DATA or text in SPECIAL_NAMES or forbidden(text):
            raise _GiveUp  # Jinja's meaning, or its error
        return Name(text)
    if kind in ("int", "str"):
        const = _literal(t)
        if t.peek()[0] == "str":
            raise _GiveUp  # adjacent strings: Jinja joins them
        return const
    if (kind, text) == ("op", "("):
        t.take()
        node = _parse_or(t)
        t.expect("op", ")")
        return node
    raise _GiveUp


def _parse_filter(t: _Tokens, node: Node) -> Node:
    name = t.expect("name")
    if name not in _FILTERS:
        raise _GiveUp
    args: list[Node] = []
    if t.peek() == ("op", "("):
        t.take()
        if t.peek() != ("op", ")"):
            args.append(_parse_or(t))
            while t.peek() == ("op", ","):
                t.take()
                args.append(_parse_or(t))
        t.expect("op", ")")
    if t.peek() in (("op", "."), ("op", "(")):
        raise _GiveUp  # a dotted filter name, a call
    return Filter(node, name, args)


def _parse_test(t: _Tokens, node: Node) -> Node:
    negated = t.peek() == ("name", "not")
    if negated:
        t.take()
    name = t.expect("name")
    kind, text = t.peek()
    if name not in _TESTS or (kind, text) in (("op", "."), ("op", "("), ("op", "[")):
        raise _GiveUp
    if kind in ("int", "str") or (kind == "name" and text not in ("else", "or", "and")):
        raise _GiveUp  # Jinja reads it as the test's argument
    test: Node = Test(node, name)
    return Not(test) if negated else test


# -- what the compiler reads: the names and constant paths, as parsing.py finds them in Jinja's --


def _walk(node: Node) -> Iterator[Node]:
    """Every node below ``node``, in the order Jinja's ``find_all`` visits its tree."""
    for child in node.children():
        yield child
        yield from _walk(child)


def _refs(root: Node) -> frozenset[Reference]:
    found: set[Reference] = set()
    attrs: set[int] = set()
    nodes = [root, *_walk(root)]
    for node in nodes:
        if isinstance(node, (Getattr, Getitem)) and isinstance(node.node, Name):
            attr: str | None = None
            if isinstance(node, Getattr):
                attr = node.attr
            elif isinstance(node.arg.const, str):
                attr = node.arg.const
            found.add(reference(node.node.name, attr))
            attrs.add(id(node.node))
    for node in nodes:
        if isinstance(node, Name) and id(node) not in attrs:
            found.add(reference(node.name, None))
    return frozenset(found)


def _paths(root: Node) -> list[tuple[Any, ...]]:
    lookups = [n for n in _walk(root) if isinstance(n, (Getattr, Getitem))]
    if isinstance(root, (Getattr, Getitem)):
        lookups.insert(0, root)  # parsing.paths_of walks a holder above the expression
    inner = {id(n.node) for n in lookups}
    chains: list[tuple[Any, ...]] = []
    for node in lookups:
        if id(node) in inner:
            continue
        parts: list[Any] = []
        cur: Node = node
        while isinstance(cur, (Getattr, Getitem)):
            parts.append(cur.attr if isinstance(cur, Getattr) else cur.arg.const)
            cur = cur.node
        if isinstance(cur, Name):
            chains.append((cur.name, *reversed(parts)))
    return chains


class PlainTree:
    """A parsed plain expression: its root, the names it reads and its constant paths."""

    __slots__ = ("lookup", "paths", "refs", "root")

    def __init__(self, root: Node, lookup: bool) -> None:
        self.root = root
        self.lookup = lookup  # a plain lookup: its value is handed over as it is (compiling.py)
        self.refs = _refs(root)
        self.paths = _paths(root)

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """The value the sandbox gives, or GAVE_UP. Run under a fresh budget (budget.BUDGET)."""
        try:
            value = self.root.value(context)
            if value is UNDEFINED:
                return GAVE_UP
            if self.lookup:
                return value
            # What compiling.Expression.evaluate does with a made value: a JSON value (here:
            # only those as_json hands back unchanged), sized under the budget.
            if type(value) not in _SCALARS or (type(value) is float and not math.isfinite(value)):
                return GAVE_UP
            check_size(value)
            return value
        except (_GiveUp, SandboxRefused):
            return GAVE_UP
        except Exception:  # a comparison or filter raising: Jinja words the error
            return GAVE_UP


@functools.lru_cache(maxsize=4096)
def parse(source: str, lookup: bool = False) -> PlainTree | None:
    """The plain tree of ``source``, or None when Jinja must compile it. ``lookup``: the source
    is a plain lookup, whose value is not converted or sized (compiling._LOOKUP)."""
    items = _tokens(source)
    if not items:
        return None
    t = _Tokens(items)
    try:
        root = _parse_or(t)
        return PlainTree(root, lookup) if t.peek()[0] == "end" else None
    except (_GiveUp, RecursionError):
        return None
