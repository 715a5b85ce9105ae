"""Hostile ``${{ }}`` expressions: refused with a clear error, fast, small, touching nothing."""

from __future__ import annotations

from typing import Any

import pytest

from runner.errors import ExpressionError
from runner.expr import compile_expression, compile_value, evaluate_value

from .harness import MAX_PEAK_BYTES, MAX_SECONDS, attempt

# Jinja and the sandbox are imported with the first expression that is no plain lookup
# (expr/lookup.py): imported here, so the audit below sees what an expression does, not the
# opening of those modules' files.
compile_expression("1 + 1").evaluate({})


class Thing:
    def method(self) -> str:
        return "m"


def helper() -> None:
    """A function in the context: its code and globals must stay out of reach."""


CONTEXT: dict[str, Any] = {
    "x": Thing(),
    "f": helper,
    "params": {"n": 3, "title": "t"},
    "text": "a b " * 10,
}

HOSTILE: list[tuple[str, str]] = [
    # object-graph walks
    ("().__class__.__base__.__subclasses__()", "access to attribute '__class__'"),
    ("x.__class__.__mro__", "access to attribute '__class__'"),
    ("x.__init__.__globals__", "access to attribute '__init__'"),
    ("x.method.__func__.__globals__", "access to attribute '__func__'"),
    ("f.__globals__", "'f.__globals__' is undefined"),
    ("f|attr('__code__')", "is undefined"),
    ("x|attr('__class__')|attr('__subclasses__')", "is undefined"),
    ("range(3)|map(attribute='__class__')|list", "holds an undefined (missing or unsafe)"),
    ("params.items.__self__", "is undefined"),
    # format-string tricks
    ("'{0.__class__}'.format(x)", "access to attribute '__class__'"),
    ("'{0.__globals__}'.format(f)", "access to attribute '__globals__'"),
    ("'{0.__init__.__globals__}'.format(x)", "access to attribute '__init__'"),
    ("'%999999999d' % 1", "a format width over the limit"),
    ("'%*d' % (999999999, 1)", "argument 999999999 is over the limit"),
    ("'{:999999999}'.format(1)", "a format width over the limit"),
    ("'{:{}}'.format(1, '999999999')", "a format width over the limit"),
    ("'%.999999999f'|format(1.0)", "a format width over the limit"),
    # globals that are not there
    ("cycler('a', 'b')", "'cycler' is undefined"),
    ("joiner()", "'joiner' is undefined"),
    ("lipsum(n=5)", "'lipsum' is undefined"),
    ("namespace(a=1)", "'namespace' is undefined"),
    ("config", "'config' is undefined"),
    ("request", "'request' is undefined"),
    ("self", "'self' is not available in the sandbox"),
    ("dict(a=1)", "'dict' is undefined"),
    # size and time bombs
    ("9**(9**9)", "power result would be too large"),
    ("9**9**9**9**9", "power result would be too large"),
    ("'a'*10**10", "repetition result would be too large"),
    ("[1]*10**9", "repetition result would be too large"),
    ("[[1]*3000]*3000", "repetition result would be too large"),
    ("range(10**12)", "argument 1000000000000 is over the limit"),
    ("range(10**6)", "range of 1000000 elements is over the limit"),
    ("'a'|center(10**9)", "argument 1000000000 is over the limit"),
    ("'ab'.ljust(10**7)", "argument 10000000 is over the limit"),
    ("[1, 2]|batch(10**9)|list", "argument 1000000000 is over the limit"),
    ("('a ' * 1000000)|wordwrap(1, wrapstring='x'*1000)", "'wordwrap' result would be too large"),
    ("('a\n' * 100000)|indent(1000)", "'indent' result would be too large"),
    ("('x'*1000000)|replace('x', 'yy'*1000)", "'replace' result would be too large"),
    ("('x'*1000000).replace('x', 'yy'*1000)", "'replace' result would be too large"),
    ("'a\tb'.expandtabs(100)", "str.expandtabs is not available"),
    ("range(10000)|map('center', 100000)|join", "produced more than the limit"),
    ("(range(10000)|list|string) * 1000", "repetition result would be too large"),
    ("'-'.join(['b']*3000000)", "repetition result would be too large"),
    ("('a'*8000000) ~ ('b'*8000001)", "over 16000000 characters"),
    ("(" * 5_000 + "1" + ")" * 5_000, "nesting deeper than 200"),
    ("[" * 201 + "]" * 201, "nesting deeper than 200"),
    ("1 + " * 2_000_000 + "1", "over the limit of 20000"),
    # big builders (issue 16 §14): each result's size is estimated before it is made
    ("range(10000)|list|tojson(indent=1000000)", "'tojson' result would be too large"),
    ("[[[[1]]]]|tojson(indent=100000)", ""),  # small: allowed, a few MB
    ("range(10000)|join('x' * 1000000)", "'join' result would be too large"),
    ("range(3000)|map('string')|join('x' * 10000)", "'join' result would be too large"),
    ("('x' * 10000).join(range(3000)|map('string'))", "'join' result would be too large"),
    ("('%999999s' * 2000)|format(*range(2000))", "'format' result would be too large"),
    ("('{:999999}' * 100).format(*range(100))", "'format' result would be too large"),
    ("('%999999s' * 20) % (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)",
     "format result would be too large"),
    ("('%.999999f' * 20)|format(*range(20))", "'format' result would be too large"),
    ("('x' * 100000).translate({120: 'y' * 1000})", "'translate' result would be too large"),
    ("('x ' * 2000000).split()", "'split' result would be too large"),
    ("('x,' * 2000000).split(',')", "'split' result would be too large"),
    ("('x\n' * 2000000).splitlines()", "'splitlines' result would be too large"),
    ("('x' * 2000000)|list", "'list' result would be too large"),
    ("('\U0001f600' * 2000000)|urlencode", "'urlencode' result would be too large"),
    ("('&' * 4000000)|escape", "'escape' result would be too large"),
    ("('x' * 6000000)|upper", "'upper' result would be too large"),
    ("('x' * 6000000).title()", "'title' result would be too large"),
    ("[1]|slice(1000000)", "'slice' result would be too large"),
]


@pytest.mark.parametrize(("source", "expected"), HOSTILE, ids=[s[:40] for s, _ in HOSTILE])
def test_hostile_expression_is_refused(
    source: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_TEST_SECRET", "s3cr3t-value")

    def go() -> None:
        compile_expression(source).evaluate(CONTEXT)

    outcome = attempt(go)
    if not expected:  # a case that stays allowed: bounded all the same
        assert outcome.error is None, outcome.error
        assert outcome.peak_bytes < MAX_PEAK_BYTES
        return
    assert isinstance(outcome.error, ExpressionError), outcome.error
    assert expected in outcome.error.message
    assert "s3cr3t" not in str(outcome.error)
    assert outcome.seconds < MAX_SECONDS
    assert outcome.peak_bytes < MAX_PEAK_BYTES
    assert outcome.events == []  # no file opened, no process started, no env read


def test_left_associative_powers_stay_allowed_when_small() -> None:
    # Jinja's ** is left-associative: 9**9**9 is (9**9)**9, a 261-bit number.
    assert compile_expression("9**9**9").evaluate({}) == (9**9) ** 9
    assert compile_expression("2**64").evaluate({}) == 2**64


def test_environment_and_modules_are_out_of_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_TEST_SECRET", "s3cr3t-value")
    for source in (
        "environ",
        "os.environ",
        "env.RUNNER_TEST_SECRET",
        "__import__('os')",
        "open('/etc/passwd')",
        "globals()",
        "__builtins__",
    ):
        outcome = attempt(lambda s=source: compile_expression(s).evaluate(CONTEXT))
        assert isinstance(outcome.error, ExpressionError), source
        assert "undefined" in outcome.error.message or "not available" in outcome.error.message
        assert outcome.events == []


DATA = "{{ 7*7 }} ${{ params }} {% for i in range(10**9) %}x{% endfor %} ${{ 9**9**9 }}"


def test_data_that_looks_like_expressions_flows_through_unchanged() -> None:
    context = {"reply": DATA, "params": {"secret": "no"}}
    where = lambda _p: None  # noqa: E731
    assert evaluate_value(compile_value("${{ reply }}", where), context) == DATA
    assert evaluate_value(compile_value("said: ${{ reply }}!", where), context) == f"said: {DATA}!"
    assert evaluate_value(compile_value({"a": ["${{ reply }}"]}, where), context) == {"a": [DATA]}
