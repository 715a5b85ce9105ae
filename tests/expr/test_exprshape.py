"""The shape cache compiles exactly what a full Jinja parse compiles, or steps aside."""

from __future__ import annotations

from typing import Any

import jinja2
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import nodes

from runner import expr as ex
from runner.errors import ExpressionError
from runner.expr import compiling, sharing
from runner.expr.shapes import KEYWORDS, split

NAMES = [
    "a",
    "b1",
    "steps",
    "params",
    "output",
    "length",
    "upper",
    "join",
    "default",
    "x_y",
    "self",
    "_runner_loop",
    "nofilter",
    "defined",
    "none",
    "true",
    "not",
    "and",
    "or",
    "in",
    "is",
    "if",
    "else",
    "range",
    "zq0",
    "loop",
]
OPS = [
    "==",
    "!=",
    ">",
    "<",
    ">=",
    "<=",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "~",
    ".",
    "|",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "=",
]
SPACES = [" ", "", "  ", "\n", "\t"]


def _token(kind: str, pick: int) -> str:
    if kind == "name":
        return NAMES[pick % len(NAMES)]
    if kind == "int":
        return str(pick % 1000)
    if kind == "str":
        return repr("s" * (pick % 3) + "zq" * (pick % 2))
    return OPS[pick % len(OPS)]


token = st.tuples(
    st.sampled_from(["name", "name", "int", "str", "op", "op", "op"]),
    st.integers(0, 10_000),
    st.sampled_from(SPACES),
)


def _source(tokens: list[tuple[str, int, str]], shift: int = 0) -> str:
    out = []
    for kind, pick, space in tokens:
        if kind == "name" and NAMES[pick % len(NAMES)] not in KEYWORDS:
            pick += shift  # another instance of the same shape: other names and constants
        elif kind in ("int", "str"):
            pick += shift
        out.append(_token(kind, pick) + space)
    return "".join(out)


def _same(a: Any, b: Any) -> bool:
    """Equal trees, line numbers included (jinja's == ignores them)."""
    if isinstance(a, nodes.Node):
        return (
            type(a) is type(b)
            and a.lineno == b.lineno
            and all(_same(x, y) for x, y in zip(a.iter_fields(), b.iter_fields(), strict=True))
        )
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def _check(source: str) -> None:
    fast = sharing.compile_by_shape(source)
    try:
        slow = compiling.compile_parsed(source)
    except (jinja2.TemplateSyntaxError, RecursionError):
        assert fast is None, source
        return
    if fast is None:
        return
    refs, lazy = fast
    assert refs == slow[0], source
    assert _same(lazy.expr, slow[1].expr), source


@settings(max_examples=400, deadline=None)
@given(st.lists(token, min_size=1, max_size=12), st.integers(1, 50))
def test_shape_instances_parse_like_jinja(tokens: list[tuple[str, int, str]], shift: int) -> None:
    _check(_source(tokens))
    _check(_source(tokens, shift))


def test_common_shapes_take_the_fast_path() -> None:
    for source in [
        "steps.h00001.output.short",
        "params.n > 3 and steps.draft.output.ok",
        "steps.a.output.text | length > 100",
        "x is defined",
        "not x",
        "a.b[0] == 'q'",
        "[1, 2] | join(',')",
    ]:
        assert split(source) is not None
        assert sharing.compile_by_shape(source) is not None
        _check(source)


def test_outside_the_subset_falls_back() -> None:
    for source in ["'a' 'b'", "x.0.1", "1.5", "'\\n'", "é", "{'a': {'b': 1}}", "x | a.b", "007"]:
        assert sharing.compile_by_shape(source) is None
        _check(source)


def test_errors_come_from_the_full_parse() -> None:
    ex.compile_expression("steps.a.output | length")  # warm the shape
    for source, message in [
        ("steps.a.output | nope", "no filter named 'nope'"),
        ("self | length", "'self' is not available in the sandbox"),
    ]:
        try:
            ex.compile_expression(source)
        except ExpressionError as exc:
            assert message in exc.message
        else:
            raise AssertionError(source)


def _grammar() -> st.SearchStrategy[str]:
    name = st.sampled_from(NAMES)
    atom = st.one_of(
        name,
        st.integers(0, 99).map(str),
        st.sampled_from(["'a'", '"zq"', "''"]),
        st.tuples(name, name).map(".".join),
    )
    binop = st.sampled_from([" == ", " != ", " > ", " and ", " or ", " + ", " in ", "~", " * "])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, binop, inner).map("".join),
            inner.map(lambda e: f"not {e}"),
            inner.map(lambda e: f"({e})"),
            st.tuples(inner, name).map(lambda p: f"{p[0]} | {p[1]}"),
            st.tuples(inner, name, inner).map(lambda p: f"{p[0]}|{p[1]}({p[2]}, k={p[2]})"),
            st.tuples(inner, name).map(lambda p: f"{p[0]} is {p[1]}"),
            st.tuples(inner, inner, inner).map(lambda p: f"{p[0]} if {p[1]}\nelse {p[2]}"),
            st.tuples(inner, inner).map(lambda p: f"{p[0]}[{p[1]}]"),
            st.tuples(inner, inner).map(lambda p: f"[{p[0]}, {p[1]}]"),
            st.tuples(inner, inner).map(lambda p: f"{{{p[0]}: {p[1]} }}"),
        )

    return st.recursive(atom, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_grammar())
def test_grammar_expressions_parse_like_jinja(source: str) -> None:
    _check(source)


# -- shared code: an instance evaluates with its shape's compiled code, values put in place ---


def _leaf(i: int) -> Any:
    return [i, "zq", f"s{i}", None, True, 2.5, [1, 2], {"a": i}][i % 8]


def _data(depth: int, seed: int) -> Any:
    if depth == 0:
        return _leaf(seed)
    return {n: _data(depth - 1, seed + i) for i, n in enumerate(NAMES)}


CONTEXTS = [_data(2, s) for s in (0, 3)] + [{n: _leaf(i) for i, n in enumerate(NAMES)}]


def _outcome(lazy: Any, context: dict[str, Any]) -> tuple[str, Any]:
    expression = ex.Expression("e", None, frozenset(), lazy)
    try:
        value = expression.evaluate(context)
    except ExpressionError as exc:
        return "error", exc.message
    try:  # by repr: a value may hold undefineds, which refuse to be compared
        return "value", repr(value)
    except Exception as exc:
        return "unprintable", type(exc).__name__


def _check_shared(source: str) -> bool:
    """The shared-code evaluation of ``source`` matches its own compile; True if shared."""
    fast = sharing.compile_by_shape(source)
    if fast is None or fast[1]._facts is None or fast[1]._facts.shared_code() is None:
        return False
    try:
        slow = compiling.compile_parsed(source)
    except (jinja2.TemplateSyntaxError, RecursionError):
        raise AssertionError(f"{source!r} compiled by shape but not in full") from None
    for context in CONTEXTS:
        assert _outcome(fast[1], context) == _outcome(slow[1], context), source
    return True


@settings(max_examples=300, deadline=None)
@given(_grammar())
def test_shared_code_evaluates_like_its_own_compile(source: str) -> None:
    _check_shared(source)


@settings(max_examples=200, deadline=None)
@given(st.lists(token, min_size=1, max_size=10), st.integers(1, 50))
def test_shared_code_of_token_soup_evaluates_like_its_own_compile(
    tokens: list[tuple[str, int, str]], shift: int
) -> None:
    _check_shared(_source(tokens))
    _check_shared(_source(tokens, shift))


def test_common_shapes_share_their_code() -> None:
    for source in [
        "steps.h00001.output.short",
        "steps.h00002.output.short",
        "params.n > 3 and steps.draft.output.ok",
        "a.b[1] == 'q'",
        "x in ['a', 'b'] or y not in ('c', 'd')",
        "params.n + 2 * 7",
    ]:
        assert _check_shared(source), source
    first = sharing.compile_by_shape("steps.h00001.output.short")
    second = sharing.compile_by_shape("steps.h00009.output.short")
    assert first is not None and second is not None
    assert first[1].render[0] is second[1].render[0]  # one compiled template for the shape
    context = {"steps": {"h00009": {"output": {"short": "ok"}}}}
    assert _outcome(second[1], context) == ("value", "'ok'")


def test_names_jinja_treats_specially_compile_on_their_own() -> None:
    fast = sharing.compile_by_shape("self.x")  # a shape-mate of `a.x`, but `self` is special
    assert fast is None or fast[1]._facts is None


def test_false_constants_compile_on_their_own() -> None:
    """`0 and a` is compiled with a jump its shape-mate `7 and a` does not have."""
    for source in ["0 and a", "'' or a", "a[0]"]:
        fast = sharing.compile_by_shape(source)
        assert fast is not None and fast[1]._facts is None, source
    assert not _check_shared("0 and a")
    context = {"a": 5}
    assert _outcome(sharing.compile_by_shape("0 and a")[1], context) == ("value", "0")  # type: ignore[index]
    assert _outcome(sharing.compile_by_shape("7 and a")[1], context) == ("value", "5")  # type: ignore[index]


# -- dotted lookups: answered from the data, parsed and compiled by Jinja only when needed -----

DICT_NAMES = [*NAMES, "items", "keys", "get", "__class__", "mro"]
LOOKUP_CONTEXTS = [
    *CONTEXTS,
    {"steps": {"a": {"items": 1, "output": {"keys": [1], "get": None}}}, "params": {}},
    {"steps": {"a": jinja2.StrictUndefined(name="a")}, "range": {"a": 1}, "self": {"a": 2}},
]


def _lookup_outcome(expression: ex.Expression, context: dict[str, Any]) -> tuple[str, Any]:
    try:
        value = expression.evaluate(context)
    except ExpressionError as exc:
        return "error", exc.message
    try:
        return "value", repr(value)
    except Exception as exc:
        return "unprintable", type(exc).__name__


def _check_lookup(source: str) -> None:
    try:
        refs, lazy = compiling.compile_parsed(source)
    except (jinja2.TemplateSyntaxError, RecursionError) as exc:
        try:
            ex.compile_expression(source)
        except ExpressionError as err:
            assert getattr(exc, "message", None) is None or exc.message in err.message
            return
        raise AssertionError(f"{source!r} compiled, but not in full") from None
    fast = ex.compile_expression(source)
    slow = ex.Expression(source, None, refs, lazy)
    assert fast.refs == refs, source
    assert _same(fast.tree, slow.tree), source
    for context in LOOKUP_CONTEXTS:
        assert _lookup_outcome(fast, context) == _lookup_outcome(slow, context), source


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(DICT_NAMES), min_size=1, max_size=5), st.sampled_from(SPACES))
def test_dotted_lookups_answer_what_jinja_answers(names: list[str], space: str) -> None:
    _check_lookup(space + ".".join(names) + space)


def test_a_dotted_lookup_is_neither_parsed_nor_compiled_until_needed() -> None:
    source = "steps.h00042.output.short"
    expression = ex.compile_expression(source)
    assert expression.path == ("steps", "h00042", "output", "short")
    assert expression._fn is None  # no Jinja parse, no code
    context = {"steps": {"h00042": {"output": {"short": "ab12"}}}}
    assert expression.evaluate(context) == "ab12"
    assert expression._fn is None
    with_error = {"steps": {"h00042": {"output": {}}}}
    try:
        expression.evaluate(with_error)
    except ExpressionError as exc:
        assert exc.message == f"'{source}' is undefined"  # worded by the compiled expression
    else:
        raise AssertionError("a missing key is an error")
    for source in ["steps.a.output.true", "self.a", "loop.index", "_runner_x.y", "a . b", "a.0"]:
        assert compiling._dotted(source) is None, source
        _check_lookup(source)
