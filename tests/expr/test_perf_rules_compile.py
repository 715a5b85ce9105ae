"""The cheaper paths of compiling `when`/`check` keep their meaning: the references a rule may
read, where errors point, YAML positions and depth limits, multi-type schema checks, lazy
expression trees, and no asyncio import just to validate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from runner import expr as ex
from runner.errors import InvalidPipeline, Location
from runner.expr import parsing
from runner.expr.checks import Scope
from runner.expr.rules import RuleBook
from runner.pipeline.compiler import compile_pipeline
from runner.source._fastschema import compile_schema
from runner.source.document import parse_text

HEAD = "runner: 1\nname: p\nparams:\n  n: {type: integer, default: 5}\nsteps:\n"
FIRST = "  a:\n    uses: hash\n    with: {value: x}\n"


def compile_text(tmp_path: Path, step: str) -> Any:
    file = tmp_path / "p.yaml"
    file.write_text(HEAD + FIRST + step)
    return compile_pipeline(file)


def test_a_when_reading_a_step_depends_on_it(tmp_path: Path) -> None:
    plan = compile_text(
        tmp_path,
        "  b:\n    uses: hash\n    when: \"${{ params.n > 3 and steps.a.output.short != '' }}\"\n"
        "    with: {value: y}\n",
    )
    assert plan.steps["b"].deps == ("a",)
    assert {(r.root, r.attr) for r in plan.steps["b"].when.refs} == {
        ("params", "n"),
        ("steps", "a"),
    }


@pytest.mark.parametrize(
    ("rule", "message", "line"),
    [
        ('when: "${{ steps.zz.output }}"', "unknown step 'zz'", 11),
        ('when: "${{ params.m > 1 }}"', "unknown param 'm'", 11),
        ('when: "${{ output.ok }}"', "unknown name 'output' in expression", 11),
        ('check: ["true", "steps.a.output", "${{ nope.x }}"]', "unknown name 'nope'", 11),
    ],
)
def test_an_unknown_reference_in_a_rule_is_located_and_names_the_step(
    tmp_path: Path, rule: str, message: str, line: int
) -> None:
    with pytest.raises(InvalidPipeline) as caught:
        compile_text(tmp_path, f"  b:\n    uses: hash\n    {rule}\n    with: {{value: y}}\n")
    assert caught.value.step == "b"
    assert message in caught.value.message
    assert caught.value.where is not None and caught.value.where.line == line


def test_a_check_may_read_the_output_it_judges(tmp_path: Path) -> None:
    plan = compile_text(
        tmp_path, "  b:\n    uses: hash\n    check: \"output.short != ''\"\n    with: {value: y}\n"
    )
    assert [r.root for r in plan.steps["b"].checks[0].refs] == ["output"]


def test_rule_refs_include_the_message_expressions() -> None:
    book = RuleBook(lambda p: Location("p.yaml", len(p), 1), {}, {}, Path.cwd())
    entry = book.add_step(
        "s", when={"expr": "params.n > 1", "message": "${{ steps.a.output.why }}"}
    )
    assert entry.when is not None
    assert {(r.root, r.attr) for r in entry.when.refs} == {("params", "n"), ("steps", "a")}
    plain = book.add_step("t", when="params.n > 1")
    assert plain.when is not None and plain.when.refs == next(plain.when.expressions()).refs


def test_scope_locates_at_the_nearest_known_ancestor_and_unhashable_paths() -> None:
    known = {("steps", "a"): Location("p.yaml", 4, 3)}
    scope = Scope(known.get, {}, {}, Path.cwd())
    assert scope.where(("steps", "a", "when", 0)) == Location("p.yaml", 4, 3)
    assert scope.where(("steps", "a", "when", 0)) == Location("p.yaml", 4, 3)  # cached
    assert scope.where(("other",)) is None
    by_length = Scope(lambda p: Location("p.yaml", len(p), 1), {}, {}, Path.cwd())
    assert by_length.where(("steps", "a", ["x"])) == Location("p.yaml", 3, 1)  # not cacheable


def test_yaml_positions_of_keys_and_values() -> None:
    src = parse_text("a:\n  b: text\n  c: [1, 2]\n  '3': odd key\n", "f.yaml")
    assert src.data == {"a": {"b": "text", "c": [1, 2], "3": "odd key"}}
    assert src.where(("a", "b")) == Location("f.yaml", 2, 6)
    assert src.where(("a", "b"), key=True) == Location("f.yaml", 2, 3)
    assert src.where(("a", "c", 1)) == Location("f.yaml", 3, 10)
    assert src.where(("a", "c", 1), key=True) == Location("f.yaml", 3, 10)  # no key: the value
    assert ("a", "<key>") not in src.values  # the place of a constructed key is not a value


@pytest.mark.parametrize("leaf", ["text", "[1]", "1"])
def test_a_value_past_the_depth_limit_is_refused_whatever_its_type(leaf: str) -> None:
    text = "".join(f"{'  ' * i}k:\n" for i in range(201)) + f"{'  ' * 201}k: {leaf}\n"
    with pytest.raises(InvalidPipeline, match="nested too deeply"):
        parse_text(text, "deep.yaml")
    shallow = "".join(f"{'  ' * i}k:\n" for i in range(198)) + f"{'  ' * 198}k: {leaf}\n"
    assert parse_text(shallow, "ok.yaml").data is not None


@pytest.mark.parametrize(
    "kinds",
    [["string", "object", "boolean"], ["array", "null"], ["integer", "string"], ["number", "null"]],
)
def test_multi_type_schemas_agree_with_jsonschema(kinds: list[str]) -> None:
    schema = {"type": kinds}
    check = compile_schema(schema)
    assert check is not None
    for value in ("s", {}, [], True, False, None, 0, 1, 1.5, 2.0):
        assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value), value


def test_a_shape_instance_builds_its_tree_once_and_still_evaluates() -> None:
    first = ex.compile_expression("steps.q1.output.n > 41", None)
    again = ex.compile_expression("steps.q1.output.n > 41", Location("p.yaml", 3, 1))
    assert first.tree is again.tree  # one tree per source, shared by its occurrences
    parsed = parsing.parse("steps.q1.output.n > 41")
    assert type(first.tree) is type(parsed) and repr(first.tree) == repr(parsed)
    assert again.evaluate({"steps": {"q1": {"output": {"n": 42}}}}) is True
    assert repr(first.tree) == repr(parsed)  # codegen left it alone


def test_validating_rules_does_not_import_asyncio() -> None:
    code = "import sys, runner.expr.rules, runner.pipeline.compiler\nprint('asyncio' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
