"""An expression hands back JSON values only: made plain, or refused at the element.

Each refusal names what the expression gave; in a run, the element that produced it fails, the
run ends (never left `running`) and `runs show --json` stays strict JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.errors import ExpressionError
from runner.expr import compile_expression
from tests.conftest import Project

CTX: dict[str, Any] = {"d": {"b": 2, "a": 1}, "xs": [3, 1, 2]}

MADE_PLAIN = [
    ("(1, 2)", [1, 2]),
    ("d|dictsort", [["a", 1], ["b", 2]]),
    ("d.items()|list", [["b", 2], ["a", 1]]),
    ("xs|map('string')", ["3", "1", "2"]),
    ("xs|select('odd')", [3, 1]),
    ("xs|batch(2)", [[3, 1], [2]]),
    ("'<b>'|escape", "&lt;b&gt;"),
    ("{'k': (1, xs|reject('odd'))}", {"k": [1, [2]]}),
    ("1.5 * 2", 3.0),
    ("d.items()", [["b", 2], ["a", 1]]),
    ("range(3)", [0, 1, 2]),
]

REFUSED = [
    ("'nan'|float", "gave nan (JSON has no NaN or infinity)"),
    ("'-inf'|float", "gave -inf (JSON has no NaN or infinity)"),
    ("1e308 * 10", "gave inf"),
    ("[1, 'nan'|float]", "at [1]: nan"),
    ("{'a': {'b': 'inf'|float}}", "at a.b: inf"),
    ("{1: 'x'}", "a mapping key 1 that is not a string"),
    ("{'a': {none: 1}}", "at a: a mapping key None that is not a string"),
    ("[xs.index]", "at [0]: a builtin_function_or_method, which is not a JSON value"),
]


@pytest.mark.parametrize(("source", "value"), MADE_PLAIN)
def test_a_result_is_made_plain_json(source: str, value: Any) -> None:
    got = compile_expression(source).evaluate(CTX)
    assert got == value
    assert json.loads(json.dumps(got, allow_nan=False)) == value


@pytest.mark.parametrize(("source", "message"), REFUSED)
def test_a_result_json_cannot_carry_is_refused(source: str, message: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(source).evaluate(CTX)
    assert message in info.value.message


def test_an_element_that_gives_nan_fails_alone_and_the_run_ends(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: nan
        steps:
          each:
            uses: template
            for_each: "${{ ['1.5', 'nan', '2'] }}"
            with:
              text: "{{ v }}"
              vars: {v: "${{ item|float }}"}
        """,
    )
    doc = project.apply()
    assert doc["run"]["status"] != "running"
    (step,) = doc["steps"]
    assert step["status"] == "partial"
    shown = project.cli("runs", "show", doc["run"]["id"], "--json")

    def refuse(token: str) -> Any:
        raise AssertionError(f"{token} in runs show --json")

    record = json.loads(shown.stdout, parse_constant=refuse)
    assert record["run"]["status"] != "running"
    by_element = {e["element"]: e for e in record["executions"]}
    assert by_element[1]["status"] == "failed"
    assert "gave nan (JSON has no NaN or infinity)" in by_element[1]["error"]
    assert "pipeline.yaml:9:" in by_element[1]["error"]
    assert by_element[0]["output"]["text"] == "1.5" and by_element[2]["output"]["text"] == "2.0"


def test_a_for_each_list_with_nan_fails_the_step_not_the_process(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: nanlist
        steps:
          each:
            uses: template
            for_each: "${{ [1, 'inf'|float] }}"
            with: {text: "{{ v }}", vars: {v: "${{ item }}"}}
          after:
            uses: template
            with: {text: "done", vars: {}}
        """,
    )
    doc = project.apply()
    assert "Traceback" not in doc["_stderr"]
    assert doc["run"]["status"] == "partial"  # `after` does not need `each`: it ran
    assert {s["id"]: s["status"] for s in doc["steps"]} == {"each": "failed", "after": "ran"}
