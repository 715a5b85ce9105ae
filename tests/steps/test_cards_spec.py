"""Card spec loading: the shipped spec, the JSON Schema, and errors at file:line:column."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.errors import InvalidPipeline
from runner.steps.cards import load_spec
from runner.steps.cards.spec import SCHEMA_PATH
from tests.steps.test_cards_builder import spec

MINIMAL = """\
title: DemoCard
schema_version: 2
key:
  item_key:
    id: {type: int, value: "${{ item_id }}"}
inputs:
  item_id: {type: int, required: true}
  label: {type: string, required: false}
patterns:
  close: {regex: 'close', ignore_case: true}
fields:
  main:
    scale:
      type: enum
      allowed: [close, medium]
      rules:
        - when: {matches: {value: "${{ label }}", pattern: close}}
          value: close
        - else: medium
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "card.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(InvalidPipeline) as ei:
        load_spec(path)
    return str(ei.value).replace(str(path), "card.yaml")


def test_shipped_spec_loads() -> None:
    s = spec()
    assert (s.title, s.schema_version, s.key_group) == ("RenderPromptCard", 1, "shot_key")
    assert s.unordered == {
        "id_policy.allowed_base_entity_ids": None,
        "id_policy.allowed_outlook_pairs": "character_id|outlook_id",
        "background_binding.owned_objects": None,
        "continuity_elements_used.fixed_elements": "element_id|element_type",
        "asset_requirements.required_refs": "kind|id",
        "asset_requirements.forbidden_refs": "kind|reason",
    }
    assert s.hash_excluded == frozenset({"_card_metadata", "render_prompt_card_hash"})
    assert list(s.groups) == [
        "shot_key",
        "render_strategy",
        "id_policy",
        "background_binding",
        "continuity_elements_used",
        "asset_requirements",
    ]


def test_close_framing_pattern_is_defined_once() -> None:
    text = Path(spec().path).read_text(encoding="utf-8")
    assert text.count("클로즈") == 2  # the regex and its description, nowhere else
    assert text.count("regex:") == 3


def test_minimal_spec_builds(tmp_path: Path) -> None:
    from runner.steps.cards import build_card

    s = load_spec(write(tmp_path, MINIMAL))
    assert build_card(s, {"item_id": 3, "label": "CLOSE-up"}).card == {
        "schema_version": 2,
        "item_key": {"id": 3},
        "main": {"scale": "close"},
    }


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "schema_version: 2",
            "schema_version: 2\nextra_key: 1",
            "card.yaml:3:1: unknown key 'extra_key'",
        ),
        (
            "{regex: 'close'",
            "{regex: '(close'",
            "card.yaml:10:18: pattern 'close' is not a valid "
            "regex: missing ), unterminated subpattern at position 0",
        ),
        ("pattern: close}", "pattern: far}", "card.yaml:17:60: unknown pattern 'far'"),
        (
            '"${{ item_id }}"',
            '"${{ item_idd }}"',
            "card.yaml:5:28: 'item_idd' reads unknown name 'item_idd'",
        ),
        ('"${{ label }}"', '"${{ label + }}"', "card.yaml:17:35: invalid expression 'label +'"),
        (
            "value: close\n",
            "value: closed\n",
            "card.yaml:18:18: main.scale: 'closed' is not one of ['close', 'medium']",
        ),
        (
            "      allowed: [close, medium]\n",
            "",
            "card.yaml:14:7: `allowed` is required with type enum, and only with it",
        ),
        (
            "        - else: medium",
            "        - else: medium\n        - else: close",
            "card.yaml:19:11: a rule without `when` must be the last rule",
        ),
        (
            "  label: {type: string, required: false}",
            "  label: {type: string, required: false}\n  label: {type: int, required: true}",
            "card.yaml:9:3: duplicate key 'label'",
        ),
        ("title: DemoCard", "title: [DemoCard", "card.yaml:2:15: invalid YAML"),
        (
            "  item_id: {type: int, required: true}",
            "  item_id: {type: int}",
            "card.yaml:7:12: inputs/item_id: 'required' is a required property",
        ),
        (
            "      type: enum",
            "      type: float",
            "card.yaml:14:13: fields/main/scale/type: 'float' is not one of",
        ),
    ],
)
def test_spec_errors_point_at_file_line_column(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in MINIMAL
    text = error(tmp_path, MINIMAL.replace(old, new, 1))
    assert text.startswith(message), text


def test_items_on_a_non_list_field_is_an_error(tmp_path: Path) -> None:
    text = MINIMAL + "    other:\n      type: string\n      items: [a]\n"
    assert error(tmp_path, text) == (
        "card.yaml:21:7: `items` builds a list, but the field is declared string"
    )


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipeline, match="no such card spec"):
        load_spec(tmp_path / "absent.yaml")


def test_every_schema_key_has_a_description() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    missing: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and "description" not in sub:
                    missing.append(f"{path}/{name}")
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(schema, "")
    assert missing == []
