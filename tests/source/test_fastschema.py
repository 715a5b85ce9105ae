"""The fast schema predicate agrees with jsonschema wherever it gives an answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from runner.errors import InvalidPipeline, Location
from runner.pipeline.loader import pipeline_schema, schema_errors
from runner.source._fastschema import Unsure, compile_schema
from runner.source.document import parse_file
from runner.steps.cards.spec import SCHEMA_PATH as CARD_SCHEMA
from runner.steps.registry import default_registry

ROOT = Path(__file__).resolve().parent.parent.parent


def _schemas() -> list[dict[str, Any]]:
    registry = default_registry()
    steps = [registry.get(n).schema for n in registry.names()]  # type: ignore[union-attr]
    return [pipeline_schema(), *steps, json.loads(CARD_SCHEMA.read_text(encoding="utf-8"))]


def _agrees(schema: dict[str, Any], instance: Any) -> bool | None:
    check = compile_schema(schema)
    assert check is not None, "our schemas use only keywords the fast path implements"
    try:
        fast = check(instance)
    except Unsure:
        return None
    assert fast == Draft202012Validator(schema).is_valid(instance), instance
    return fast


def test_every_shipped_and_bad_pipeline() -> None:
    files = [*ROOT.glob("pipelines/*.yaml"), *ROOT.glob("examples/*/*.yaml")]
    files += list((ROOT / "tests" / "bad_pipelines").glob("*.yaml"))
    answered = 0
    for path in files:
        try:  # read as runner reads them
            doc = parse_file(path).data
        except InvalidPipeline:
            continue
        answered += _agrees(pipeline_schema(), doc) is not None
        steps = doc.get("steps") if isinstance(doc, dict) else None
        for step in (steps or {}).values() if isinstance(steps, dict) else ():
            for schema in _schemas()[1:]:
                if isinstance(step, dict) and "with" in step:
                    _agrees(schema, step["with"])
    assert answered > len(files) // 2


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 1.5, -2.5]),
    st.sampled_from(["", "a", "x-1", "Bad Name", "5m", "use", "shell", "hash", "${{ a }}", "1"]),
)
keys = st.sampled_from(["runner", "name", "steps", "uses", "with", "value", "path", "run", "when",
                        "needs", "params", "type", "default", "check", "retries", "timeout",
                        "cache", "phase", "a", "s1", "1x", "text", "inputs", "outputs"])  # fmt: skip


def _nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)
        ),
        max_leaves=12,
    )


values = _nested(scalars)


@settings(max_examples=400, deadline=None)
@given(values, st.integers(0, 50))
def test_random_values(instance: Any, pick: int) -> None:
    schemas = _schemas()
    _agrees(schemas[pick % len(schemas)], instance)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["s1", "a-b", "9x"]), values, min_size=1, max_size=3),
       st.sampled_from([1, True, 1.0, 2]), st.sampled_from(["demo", "Demo", 3]))  # fmt: skip
def test_pipeline_shaped_values(steps: dict[str, Any], runner: Any, name: Any) -> None:
    _agrees(pipeline_schema(), {"runner": runner, "name": name, "steps": steps})
    ok_steps = {sid: {"uses": "hash", "with": {"value": v}} for sid, v in steps.items()}
    _agrees(pipeline_schema(), {"runner": runner, "name": name, "steps": ok_steps})


def test_unknown_keywords_do_not_compile() -> None:
    assert compile_schema({"type": "object", "if": {"required": ["a"]}}) is None
    assert compile_schema({"$ref": "other.json#/x"}) is None
    assert compile_schema({"patternProperties": {"a": {}}, "additionalProperties": False}) is None


# -- tolerating ${{ }} values, as a step's `with:` is checked at compile time ------------------


def _agrees_tolerant(schema: dict[str, Any], instance: Any) -> bool | None:
    """A tolerant "valid" means loader.schema_errors with tolerate_expressions finds nothing."""
    check = compile_schema(schema, tolerate_expressions=True)
    assert check is not None
    try:
        fast = check(instance)
    except Unsure:
        return None
    if fast:
        errors = schema_errors(
            Draft202012Validator(schema),
            instance,
            where=lambda _path, key=False: Location("p.yaml", 1, 1),
            tolerate_expressions=True,
        )
        assert errors == [], (instance, [str(e) for e in errors])
    return fast


expression_values = _nested(
    st.one_of(scalars, st.sampled_from(["${{ steps.a.output.n }}", "  ${{ x }} ", "${{ [1] }}"]))
)


@settings(max_examples=600, deadline=None)
@given(expression_values, st.integers(0, 50))
def test_tolerant_valid_means_no_errors_but_about_expressions(instance: Any, pick: int) -> None:
    schemas = _schemas()
    _agrees_tolerant(schemas[pick % len(schemas)], instance)


def test_typed_fields_holding_expressions_are_decided_without_jsonschema() -> None:
    registry = default_registry()
    image = registry.get("image")
    assert image is not None
    args = {"prompt": "a harbour", "n": "${{ params.n }}", "size": "${{ params.size }}"}
    check = compile_schema(image.schema, tolerate_expressions=True)
    assert check is not None and check(args) is True
    strict = compile_schema(image.schema)
    assert strict is not None and strict(args) is False  # strictly, "n" must be an integer
    assert check({**args, "n": "four"}) is False  # a plain string is still judged


def test_the_shipped_card_spec_is_decided_without_jsonschema() -> None:
    spec = yaml.safe_load((ROOT / "cards" / "render_prompt_card.yaml").read_text(encoding="utf-8"))
    schema = json.loads(CARD_SCHEMA.read_text(encoding="utf-8"))
    assert _agrees(schema, spec) is True
    broken = {**spec, "schema_version": "one"}
    assert _agrees(schema, broken) is False
