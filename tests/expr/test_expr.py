"""runner.expr: compiling, refs, typed values, interpolation, and the budget's normal use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.errors import ExpressionError, Location, TemplateError
from runner.expr import (
    Interpolation,
    Reference,
    compile_expression,
    compile_value,
    evaluate_value,
    is_static,
    iter_expressions,
    render_template,
    template_environment,
    template_variables,
)

HERE = Location("p.yaml", 3, 7)


def where(_path: tuple[Any, ...]) -> Location:
    return HERE


def test_refs_are_found_at_compile_time() -> None:
    e = compile_expression("steps.a.output.n + params['k'] if item else index")
    assert e.refs == {
        Reference("steps", "a"),
        Reference("params", "k"),
        Reference("item", None),
        Reference("index", None),
    }


def test_a_whole_value_keeps_its_type_and_a_longer_string_is_text() -> None:
    ctx = {"params": {"n": 3, "tags": ["a", "b"], "ok": True, "none": None}}
    assert evaluate_value(compile_value("${{ params.n }}", where), ctx) == 3
    assert (
        evaluate_value(compile_value("n=${{ params.n }} ok=${{ params.ok }}", where), ctx)
        == "n=3 ok=true"
    )
    assert evaluate_value(compile_value("${{ params.tags }}!", where), ctx) == '["a", "b"]!'
    assert evaluate_value(compile_value("[${{ params.none }}]", where), ctx) == "[]"
    compiled = compile_value({"a": ["x ${{ params.n }}", 1]}, where)
    assert isinstance(compiled["a"][0], Interpolation)
    assert [e.source for e in iter_expressions(compiled)] == ["params.n"]
    assert is_static({"a": [1, "plain"]}) and not is_static(compiled)


def test_a_data_key_wins_over_a_dict_method_of_the_same_name() -> None:
    ctx = {"d": {"items": "field", "name": "x"}, "e": {"a": 1}}
    assert compile_expression("d.name").evaluate(ctx) == "x"
    assert compile_expression("d.items").evaluate(ctx) == "field"
    assert compile_expression("e.items()|list").evaluate(ctx) == [["a", 1]]  # JSON: no tuples


def test_errors_carry_the_location() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_value("${{ params.n + }}", where)
    assert info.value.where == HERE
    with pytest.raises(ExpressionError, match="unterminated"):
        compile_value("${{ params.n", where)
    with pytest.raises(ExpressionError) as info2:
        compile_expression("params.missing.x", HERE).evaluate({"params": {}})
    assert str(info2.value) == (
        "p.yaml:3:7: in 'params.missing.x': 'dict object' has no attribute 'missing'"
    )


def test_normal_work_fits_the_budget() -> None:
    e = compile_expression("range(10000)|map('string')|join(',')|length")
    assert e.evaluate({}) == 48889
    assert compile_expression("(x*3)|length").evaluate({"x": "a" * 1_000_000}) == 3_000_000


def test_templates_render_and_report_missing_variables(tmp_path: Path) -> None:
    (tmp_path / "p.j2").write_text("{% for w in words %}{{ w|upper }} {% endfor %}")
    env = template_environment(tmp_path, {"twice": lambda s: s * 2})
    assert render_template(env, name="p.j2", variables={"words": ["a", "b"]}) == "A B "
    assert render_template(env, text="{{ 'ab'|twice }}", variables={}) == "abab"
    assert template_variables(env, "{{ a }}{% for x in b %}{{ x }}{% endfor %}") == {"a", "b"}
    with pytest.raises(TemplateError, match="'words' is undefined"):
        render_template(env, name="p.j2", variables={})
    with pytest.raises(TemplateError, match=r"template not found: nope\.j2"):
        render_template(env, name="nope.j2", variables={})
