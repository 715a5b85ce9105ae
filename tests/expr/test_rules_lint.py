"""lint_rules: unused patterns and rules, impossible comparisons, `when` on a skippable step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.errors import Location
from runner.expr.rules import LintWarning, RuleBook


def where_of(path: tuple[Any, ...]) -> Location:
    return Location("p.yaml", len(path), 1)


def book(patterns: dict[str, str] | None = None, named: dict[str, Any] | None = None) -> RuleBook:
    return RuleBook(where_of, patterns or {}, named or {}, Path.cwd())


def codes(warnings: list[LintWarning]) -> list[tuple[str, str]]:
    return [(w.code, w.message) for w in warnings]


def test_clean_rules_give_no_warnings() -> None:
    b = book(
        {"close": "bye"},
        {"ok": {"matches": {"value": "${{ steps.a.output.text }}", "pattern_name": "close"}}},
    )
    b.add_step("a", check="steps.a.output.text")
    b.add_step("b", when={"rule": "ok"})
    assert b.lint({"n": "integer"}) == []


def test_unused_patterns_and_named_rules() -> None:
    b = book(
        {"used": "x", "spare": "y"},
        {
            "keep": {"matches": {"value": "v", "pattern_name": "used"}},
            "orphan": "true",
            "orphan_child": "false",
            "orphan_parent": {"rule": "orphan_child"},
        },
    )
    b.add_step("a", check={"rule": "keep"})
    assert codes(b.lint()) == [
        ("unused-rule", "rule 'orphan' is never used"),
        ("unused-rule", "rule 'orphan_child' is never used"),
        ("unused-rule", "rule 'orphan_parent' is never used"),
        ("unused-pattern", "pattern 'spare' is never used"),
    ]
    assert b.lint()[0].where == Location("p.yaml", 2, 1)


def test_comparisons_a_declared_type_makes_impossible() -> None:
    b = book()
    b.add_step("a", when="params.n == 'three'")
    b.add_step("b", when="params.n != 'three'")
    b.add_step("c", when="params.n < 'x'")
    b.add_step("d", when="params.flag in ['yes', 'no']")
    b.add_step("e", when="'3' == params.n and params.title == 'ok' and params.n == 3.0")
    assert codes(b.lint({"n": "integer", "flag": "boolean", "title": "string"})) == [
        (
            "never-true",
            "`params.n == 'three'` can never be true: params.n is declared integer "
            "and is compared with a string literal",
        ),
        (
            "always-true",
            "`params.n != 'three'` is always true: params.n is declared integer "
            "and is compared with a string literal",
        ),
        (
            "type-error",
            "`params.n < 'x'` fails at run time (incomparable types): params.n is "
            "declared integer and is compared with a string literal",
        ),
        (
            "never-true",
            "`params.flag in ['yes', 'no']` can never be true: params.flag is "
            "declared boolean and is compared with a string literal",
        ),
        (
            "never-true",
            "`'3' == params.n and params.title == 'ok' and params.n == 3.0` can never "
            "be true: params.n is declared integer and is compared with a string "
            "literal",
        ),
    ]


def test_when_reading_a_step_that_may_be_skipped() -> None:
    b = book()
    b.add_step("draft", when="params.go")
    b.add_step("review", when="steps.draft.output.ok")
    b.add_step("always", check="steps.review.output.ok")
    warnings = b.lint()
    assert codes(warnings) == [
        (
            "skipped-ref",
            "step 'review': `when` reads steps.draft, which has a `when` of its own; when 'draft' "
            "is skipped its output is undefined and this condition fails",
        )
    ]
    assert warnings[0].where == Location("p.yaml", 3, 1)
