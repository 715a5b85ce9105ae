"""runner.expr.plain: the Jinja-free evaluator gives Jinja's answer or none.

Every expression the plain parser accepts is compiled by Jinja too and compared: the names and
constant paths it reads, and, over many contexts (hostile strings among the values: data, never
code), the value or the error message of an evaluation with the plain tree against one by the
sandbox alone.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import ExpressionError
from runner.expr import compile_expression
from runner.expr.compiling import _LOOKUP, Expression, compile_parsed
from runner.expr.plain import GAVE_UP, parse

HOSTILE = [
    "",
    " ",
    "  padded\t",
    "x",
    "Hello",
    "ÉCOLE ß ﬁ",
    "' or 1 == 1 or '",
    '"; rm -rf / #',
    "{{ 7 * 7 }}",
    "}}",
    "${{ params.n }}",
    "__class__",
    "items",
    "\x00\x1b[31m",
    "line\nbreak",
    "10",
    "$(reboot)",
]

VALUES: list[Any] = [
    *HOSTILE,
    0,
    1,
    -3,
    10,
    10_000_000,
    2.5,
    0.0,
    True,
    False,
    None,
    [],
    ["a", "b"],
    [1, "x", None],
    {},
    {"text": "ok", "n": 2},
    {"items": "field", "keys": 3},
    {"text": "", "list": [1, 2, 3]},
]

NAMES = ["a", "b", "output", "params", "absent", "items", "range", "loop", "self", "result"]
ATTRS = ["text", "n", "list", "items", "keys", "get", "missing", "__class__", "upper"]


def _literal() -> st.SearchStrategy[str]:
    text = st.text(
        alphabet=st.characters(blacklist_characters="'\"\\", codec="utf-8"), max_size=6
    ).map(lambda s: f"'{s}'")
    ints = st.sampled_from(["0", "1", "3", "10", "10000000", "1.5", "-1", "01"])
    words = st.sampled_from(["true", "false", "none", "True", "False", "None"])
    return st.one_of(text, ints, words, st.just('"double"'))


def _primary() -> st.SearchStrategy[str]:
    name = st.sampled_from(NAMES)
    suffix = st.sampled_from(
        [*(f".{a}" for a in ATTRS), "[0]", "[1]", "[5]", "['text']", "['items']", "()", ".0"]
    )
    chained = st.tuples(name, st.lists(suffix, max_size=3)).map(lambda t: t[0] + "".join(t[1]))
    return st.one_of(chained, _literal())


FILTERS = [
    "| length",
    "|count",
    "| lower",
    "| upper",
    "| trim",
    "| trim('x')",
    "| default('z')",
    "| d(0)",
    "| default(a, true)",
    "| default",
    "| default(10000000)",
    "| default('z', false)",
    "| list",
    "| length()",
    "| length(1)",
    "| lower.x",
    " is defined",
    " is not defined",
    " is none",
    " is undefined",
    " is string",
    " is defined 1",
]


def _unary() -> st.SearchStrategy[str]:
    return st.tuples(_primary(), st.lists(st.sampled_from(FILTERS), max_size=2)).map(
        lambda t: t[0] + "".join(t[1])
    )


def _expression() -> st.SearchStrategy[str]:
    ops = ["==", "!=", "<", "<=", ">", ">=", "and", "or", "in", "+"]

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(ops), inner).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
            inner.map(lambda s: f"not {s}"),
            inner.map(lambda s: f"({s})"),
            st.tuples(inner, st.sampled_from(FILTERS)).map(lambda t: f"({t[0]}){t[1]}"),
        )

    return st.recursive(_unary(), extend, max_leaves=6)


def _contexts() -> st.SearchStrategy[dict[str, Any]]:
    value = st.sampled_from(VALUES)
    nested = st.one_of(
        value,
        st.dictionaries(st.sampled_from(ATTRS), value, max_size=4),
        st.lists(value, max_size=4),
    )
    return st.dictionaries(st.sampled_from(NAMES[:6]), nested, max_size=6)


def _outcome(expression: Expression, context: dict[str, Any]) -> tuple[str, str]:
    try:
        value = expression.evaluate(context)
    except ExpressionError as exc:
        return "error", str(exc)
    return "value", repr(value)  # repr: True is not 1, 1.0 is not 1


def _by_jinja(expression: Expression) -> Expression:
    return dataclasses.replace(expression, plain=None)


def _same_as_jinja(source: str, contexts: list[dict[str, Any]]) -> None:
    tree = parse(source)
    if tree is None:
        return
    refs, _ = compile_parsed(source)  # Jinja parses it, with no error
    assert refs == tree.refs
    # As compile_expression makes it (a dotted lookup is answered by lookup.py first)
    tree = parse(source, _LOOKUP.match(source) is not None)
    assert tree is not None
    plain = Expression(source, None, tree.refs, None, None, tree)
    jinja = _by_jinja(plain)
    assert plain.paths == jinja.paths
    for context in contexts:
        assert _outcome(plain, context) == _outcome(jinja, context), (source, context)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_expression(), contexts=st.lists(_contexts(), min_size=1, max_size=4))
def test_the_plain_evaluator_gives_jinjas_value_or_error(
    source: str, contexts: list[dict[str, Any]]
) -> None:
    _same_as_jinja(source, contexts)


CASES = [
    "output.text | length > 0",
    "output.text|length>0",
    "output['text'] | length >= 2 and not output.missing is defined",
    "a.items",
    "a['items']",
    "a.keys | length",
    "a.get",
    "a[0] == 1",
    "a[5] is undefined",
    "1 < a < 3",
    "a < 'x'",
    "a == b == a",
    "(a or b) and not (a and b)",
    "a | default(b) | length",
    "absent | default('x') | upper",
    "absent.x | default('x')",
    "a | default(10000000)",
    "a | trim | lower == 'x'",
    "a | upper | length",
    "a is none or a is not defined",
    "not not a",
    "a != none",
    "true == 1",
    "a.text.n",
]
CONTEXTS: list[dict[str, Any]] = [
    {},
    {"a": 2, "b": 0},
    {"a": "  X ", "b": "ÉCOLE ß ﬁ"},
    {"a": [1, 2], "b": {"items": 1}},
    {"a": {"items": "field", "text": "t"}, "output": {"text": ""}},
    {"a": None, "output": {"text": "hello"}, "missing": None},
    {"a": {"get": 1, "keys": [1, 2, 3]}, "b": [[]]},
    {"a": [1] * 1000, "b": "}}' or '"},
    {"a": float("nan"), "b": 1.0},
    {"output": {"text": ["not", "text"]}},
    {"a": ("a", "tuple"), "output": {"text": b"bytes"}},
]


@pytest.mark.parametrize("source", CASES)
def test_common_forms_are_plain_and_agree_with_jinja(source: str) -> None:
    assert parse(source) is not None, source
    _same_as_jinja(source, CONTEXTS)


def test_a_plain_check_is_answered_without_jinja() -> None:
    tree = parse("output.text | length > 0")
    assert tree is not None
    assert tree.evaluate({"output": {"text": "hi"}}) is True
    assert tree.evaluate({"output": {"text": ""}}) is False
    assert tree.evaluate({"output": {}}) is GAVE_UP  # undefined: Jinja words the error


def test_a_value_over_the_size_limit_is_refused_as_the_sandbox_refuses_it() -> None:
    big = {"output": {"text": "x" * 6_000_000}}
    source = "output.text | upper | length > 0"  # upper may triple it: over the limit
    assert parse(source) is not None
    with pytest.raises(ExpressionError, match="refused"):
        compile_expression(source).evaluate(big)
    _same_as_jinja(source, [big])
    assert compile_expression("output.text | length > 0").evaluate(big) is True


@pytest.mark.parametrize(
    "source",
    [
        "a + 1",
        "a if b else c",
        "a in b",
        "a | join(',')",
        "a.upper()",
        "a[b]",
        "'x' 'y'",
        "a | default(boolean=true)",
        "1.5 > a",
        "-1 < a",
        "loop.index",
        "self",
        "_runner_x == 1",
        "range(3) | length",
        "a['it\\'s']",
        "a is divisibleby 3",
        "a == 'ü'",
        "a.0",
    ],
)
def test_forms_outside_the_subset_go_to_jinja(source: str) -> None:
    assert parse(source) is None


def test_hostile_strings_in_the_data_are_values() -> None:
    for text in HOSTILE:
        ctx = {"output": {"text": text}}
        assert compile_expression("output.text | length > 0").evaluate(ctx) is (len(text) > 0)
        assert compile_expression("output.text | trim == 'x'").evaluate(ctx) is (
            text.strip() == "x"
        )
        expected = json.loads(json.dumps(text.upper()))
        assert compile_expression("output.text | upper").evaluate(ctx) == expected
