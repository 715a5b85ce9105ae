"""The cheap paths of card building give exactly what the reference paths give.

Covers: plain paths and literals read in Python instead of the sandbox (runner.steps.cards._fast),
the one-walk copy of canonical.prepare (runner.state.canonical.plain_copy), the sort of unordered
lists, and the quick accept of type_problem.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections import OrderedDict
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from runner.state.canonical import CanonicalError, plain_copy, prepare, sort_unordered
from runner.steps.cards import CardSpec, ContractViolation, build_card, load_spec
from runner.steps.cards._fast import FastCard
from runner.steps.cards._types import type_problem
from tests.state.test_canonical import json_values

PATHS_SPEC = """\
title: PathCard
schema_version: 1
key:
  k:
    id: {type: int, value: "${{ item_id }}"}
inputs:
  item_id: {type: int, required: true}
  shot: {type: object, required: true}
  tags: {type: list, required: true}
let:
  label:
    rules:
      - when: "${{ shot.kind == 'close' }}"
        value: close
      - else: wide
fields:
  main:
    name: {type: string, value: "${{ shot.meta.name }}"}
    name_item: {type: string, value: "${{ shot['meta']['name'] }}"}
    items_key: {type: list, value: "${{ shot.items }}"}
    label: {type: string, value: "${{ label }}"}
    tags: {type: list, unordered: true, value: "${{ tags }}"}
    fixed: {type: list, value: [b, a]}
    truth: {type: bool, value: "${{ true }}"}
    nothing: {type: string, nullable: true, value: "${{ none }}"}
    shouted: {type: string, value: "${{ shot.meta.name | upper }}"}
    nick: {type: string, nullable: true, value: "${{ shot.meta.nick | default('anon') }}"}
    loose: {type: string, value: "${{ shot.meta.nick | default('anon', true) }}"}
    where:
      type: object
      rules:
        - when: "${{ shot.kind == 'close' }}"
          value:
            name: "${{ shot.meta.name }}"
            nick: "${{ shot.meta.nick | default('') }}"
            marks: ["${{ label }}", fixed]
        - when: "${{ shot.kind == 'bad' }}"
          error: a bad shot is refused
        - when: "${{ shot.kind == 'wide' }}"
          value: {}
"""


class Shout(str):
    pass


class Number(IntEnum):
    ONE = 1


def paths_spec(tmp_path: Path) -> CardSpec:
    path = tmp_path / "paths.yaml"
    path.write_text(textwrap.dedent(PATHS_SPEC), encoding="utf-8")
    return load_spec(path)


def good_inputs() -> dict[str, Any]:
    return {
        "item_id": 7,
        "shot": {"kind": "close", "meta": {"name": "door"}, "items": ["x"]},
        "tags": ["b", "a", "c"],
    }


def reference(spec: CardSpec, inputs: dict[str, Any]) -> Any:
    """The field-by-field path's card, or its ContractViolation message."""
    saved, spec.fast = spec.fast, False
    try:
        return build_card(spec, inputs)
    except ContractViolation as exc:
        return str(exc)
    finally:
        spec.fast = saved


def built(spec: CardSpec, inputs: dict[str, Any]) -> Any:
    try:
        return build_card(spec, inputs)
    except ContractViolation as exc:
        return str(exc)


def test_plain_paths_and_literals_are_read_outside_the_template(tmp_path: Path) -> None:
    spec = paths_spec(tmp_path)
    fast = FastCard(spec)
    in_python = {
        fd.name for fd, step in zip(spec.fields(), fast.plan, strict=True) if callable(step)
    }
    # `true`, `none` parse as constants, `| upper` and a two-argument `default` are not plain
    # reads: they stay in the sandbox. For `where` the template only picks the rule.
    assert in_python == {
        "id",
        "name",
        "name_item",
        "items_key",
        "label",
        "tags",
        "fixed",
        "nick",
        "where",
    }
    card = build_card(spec, good_inputs()).card
    assert card["main"] == {
        "name": "door",
        "name_item": "door",
        "items_key": ["x"],
        "label": "close",
        "tags": ["a", "b", "c"],
        "fixed": ["b", "a"],
        "truth": True,
        "nothing": None,
        "shouted": "DOOR",
        "nick": "anon",
        "loose": "anon",
        "where": {"name": "door", "nick": "", "marks": ["close", "fixed"]},
    }
    assert build_card(spec, good_inputs()) == reference(spec, good_inputs())


@pytest.mark.parametrize(
    "shot",
    [
        {"kind": "wide", "meta": {}, "items": []},  # a missing key
        {"kind": "wide", "meta": ["name"], "items": []},  # a list on the way
        {"kind": "wide", "meta": None, "items": []},  # null on the way
        {"kind": "wide", "meta": {"name": "door"}},  # `items` missing: a dict method name
        {"kind": "wide", "meta": OrderedDict(name="door"), "items": []},  # not a plain dict
        {"kind": "wide", "meta": {"name": 3}, "items": []},  # present but the wrong type
    ],
)
def test_unusual_data_gives_what_the_sandbox_gives(tmp_path: Path, shot: dict[str, Any]) -> None:
    spec = paths_spec(tmp_path)
    inputs = {**good_inputs(), "shot": shot}
    assert built(spec, inputs) == reference(spec, inputs)


@pytest.mark.parametrize(
    "shot",
    [
        {"kind": "close", "meta": {"name": "door", "nick": None}, "items": []},  # present: kept
        {"kind": "close", "meta": {"name": "door", "nick": "d"}, "items": []},
        {"kind": "close", "meta": {"name": "door", "nick": 5}, "items": []},  # wrong type
        {"kind": "close", "meta": {"name": "door", "nick": ""}, "items": []},
        {"kind": "close", "meta": {"name": "door", "keys": 1}, "items": []},
        {"kind": "wide", "meta": {"name": "door"}, "items": []},
        {"kind": "bad", "meta": {"name": "door"}, "items": []},  # an error rule
        {"kind": "other", "meta": {"name": "door"}, "items": []},  # no rule applies
        {"kind": "wide", "meta": None, "items": []},  # `| default` past a null
        {"kind": "wide", "meta": [], "items": []},  # `| default` past a list
    ],
)
def test_defaults_and_picked_rules_give_what_the_sandbox_gives(
    tmp_path: Path, shot: dict[str, Any]
) -> None:
    spec = paths_spec(tmp_path)
    inputs = {**good_inputs(), "shot": shot}
    assert built(spec, inputs) == reference(spec, inputs)


def test_default_does_not_replace_a_dict_method_name(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        textwrap.dedent(PATHS_SPEC).replace(
            "shot.meta.nick | default('anon')", "shot.meta.keys | default('anon')"
        ),
        encoding="utf-8",
    )
    spec = load_spec(path)
    for meta in ({"name": "door"}, {"name": "door", "keys": "k"}):
        inputs = {**good_inputs(), "shot": {"kind": "wide", "meta": meta, "items": []}}
        assert built(spec, inputs) == reference(spec, inputs)


def test_the_card_shares_nothing_with_inputs_or_spec(tmp_path: Path) -> None:
    spec = paths_spec(tmp_path)
    inputs = good_inputs()
    first = build_card(spec, inputs).card
    first["main"]["items_key"].append("changed")
    first["main"]["fixed"].append("changed")
    assert inputs["shot"]["items"] == ["x"]
    assert build_card(spec, good_inputs()).card["main"]["fixed"] == ["b", "a"]


@given(json_values)
def test_plain_copy_is_the_json_round_trip(value: Any) -> None:
    copied = plain_copy(value)
    trip = json.loads(json.dumps(value))
    assert json.dumps(copied) == json.dumps(trip)  # same values, types and key order
    assert repr(copied) == repr(trip)


def test_plain_copy_is_deep_and_makes_subclasses_plain() -> None:
    value = {"a": [{"b": [1]}], "s": Shout("x"), "o": OrderedDict(k=[2])}
    copied = plain_copy(value)
    copied["a"][0]["b"].append(9)
    assert value["a"][0]["b"] == [1]
    assert type(copied["s"]) is str and type(copied["o"]) is dict
    assert copied == {"a": [{"b": [1, 9]}], "s": "x", "o": {"k": [2]}}


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"a": [1, (2, 3)]}, "$.a[1]"),
        ({"a": {"b": float("nan")}}, "$.a.b"),
        ({"a": {1: "x"}}, "$.a"),
        ({"a": [Number.ONE]}, "$.a[0]"),
        ({"a": [b"x"]}, "$.a[0]"),
    ],
)
def test_plain_copy_refuses_what_json_would_coerce(bad: Any, where: str) -> None:
    with pytest.raises(CanonicalError, match="^" + re.escape(where) + ":"):
        plain_copy(bad)
    with pytest.raises(CanonicalError):
        prepare(bad)


def test_sort_unordered() -> None:
    assert sort_unordered(["b", "a", "c"], None) == ["a", "b", "c"]
    # Non-strings sort by their canonical JSON text: "2" < "[1]" < "a".
    assert sort_unordered(["a", [1], 2], None) == [2, [1], "a"]
    objs = [{"k": "b", "n": 1}, {"k": "a", "n": 2}, {"k": "a", "n": 1}]
    assert sort_unordered(objs, "k|n") == [objs[2], objs[1], objs[0]]
    with pytest.raises(CanonicalError, match="lacks 'n'"):
        sort_unordered([{"k": "a"}], "k|n")
    with pytest.raises(CanonicalError, match="not an object"):
        sort_unordered(["a"], "k")


@pytest.mark.parametrize(
    ("value", "declared", "allowed", "ok"),
    [
        ("direct", "enum", ("direct", "close"), True),
        ("other", "enum", ("direct",), False),
        (Shout("direct"), "enum", ("direct",), False),  # enums compare the exact type too
        (True, "enum", (1,), False),
        (1, "enum", (True,), False),
        (1, "number", (), True),
        (1.5, "number", (), True),
        (True, "int", (), False),
        (Shout("x"), "string", (), True),
        (OrderedDict(), "object", (), True),
    ],
)
def test_type_problem_quick_accept_agrees(
    value: Any, declared: str, allowed: tuple[Any, ...], ok: bool
) -> None:
    assert (type_problem(value, declared, allowed) is None) is ok


def test_spec_digest_is_reused_but_an_edit_is_always_seen(tmp_path: Path) -> None:
    path = tmp_path / "card.yaml"
    first = textwrap.dedent(PATHS_SPEC)
    second = first.replace("title: PathCard", "title: PathCrd")
    second = second.replace("value: [b, a]", "value: [b, aa]")  # same size, other content
    assert len(second) == len(first)
    path.write_text(first, encoding="utf-8")
    old = 1_500_000_000_000_000_000
    os.utime(path, ns=(old, old))  # old enough to be trusted
    assert load_spec(path).title == "PathCard"
    assert load_spec(path) is load_spec(str(path))
    path.write_text(second, encoding="utf-8")
    os.utime(path, ns=(old, old))  # same size and mtime: only the ctime tells
    assert load_spec(path).title == "PathCrd"
    path.write_text(first, encoding="utf-8")  # a fresh edit, inside the clock's granularity
    assert load_spec(path).title == "PathCard"
