"""Strict shape check of a stored card (seed 002, Task 9)."""

from __future__ import annotations

from typing import Any

import pytest

from runner.steps.cards import check_shape
from tests.steps.test_cards_builder import build, spec

GOOD_HASH = "deadbeefdeadbeef"


def problems(card: Any, hash: Any = GOOD_HASH) -> list[str]:
    return check_shape(spec(), card, hash)


def test_valid_card_has_no_problems() -> None:
    assert problems(build()) == []


def test_not_applicable_mode_passes() -> None:
    card = build()
    card["render_strategy"]["mode"] = "not_applicable"
    assert problems(card) == []


def test_missing_schema_version() -> None:
    card = build()
    del card["schema_version"]
    assert problems(card) == ["schema_version is missing"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (99, "schema_version 99 != 1 (the spec's)"),
        (True, "schema_version True must be an int (a bool is not an int)"),
        ("1", "schema_version '1' must be an int (a bool is not an int)"),
        (1.0, "schema_version 1.0 must be an int (a bool is not an int)"),
    ],
)
def test_schema_version_must_be_the_specs_int(value: Any, message: str) -> None:
    card = build()
    card["schema_version"] = value
    assert problems(card) == [message]


def test_missing_or_broken_key() -> None:
    card = build()
    del card["shot_key"]
    assert problems(card) == ["shot_key is missing"]
    card = build()
    card["shot_key"] = {"shot_index": 1}
    assert problems(card) == ["shot_key.scene_index is missing"]
    card = build()
    card["shot_key"]["scene_index"] = True
    assert problems(card) == ["shot_key.scene_index is bool True, expected int"]


@pytest.mark.parametrize(
    "group",
    [
        "render_strategy",
        "id_policy",
        "background_binding",
        "continuity_elements_used",
        "asset_requirements",
    ],
)
def test_each_field_group_is_required(group: str) -> None:
    card = build()
    del card[group]
    assert problems(card) == [f"{group} is missing"]


def test_field_group_must_be_an_object() -> None:
    card = build()
    card["render_strategy"] = "not a dict"
    assert problems(card) == ["render_strategy must be an object, got str"]


@pytest.mark.parametrize(
    ("group", "name", "message"),
    [
        (
            "render_strategy",
            "mode",
            "render_strategy.mode 'totally_invented_mode' is not one of ['direct', 'simplify', "
            "'partial_focus', 'reframe', 'anchored_reference', 'close_insert', 'not_applicable']",
        ),
        (
            "background_binding",
            "mode",
            "background_binding.mode 'totally_invented_mode' is not one of ['background_ref_attached', "
            "'skipped_close_framing', 'background_mode_off', 'not_applicable']",
        ),
        (
            "asset_requirements",
            "readiness_policy",
            "asset_requirements.readiness_policy 'totally_invented_mode' is not one of "
            "['block_if_missing', 'skipped_by_policy', 'not_applicable']",
        ),
    ],
)
def test_enums_are_enforced(group: str, name: str, message: str) -> None:
    card = build()
    card[group][name] = "totally_invented_mode"
    assert problems(card) == [message]


def test_declared_types_are_enforced_and_every_problem_reported() -> None:
    card = build()
    card["id_policy"]["must_use_composite_character_ids"] = 1
    card["background_binding"]["owned_objects"] = "door"
    del card["continuity_elements_used"]["forward_zoom_targets"]
    card["render_strategy"]["camera_direction"] = None
    assert problems(card) == [
        "render_strategy.camera_direction is null, expected string",
        "id_policy.must_use_composite_character_ids is int 1, expected bool",
        "background_binding.owned_objects is string 'door', expected list",
        "continuity_elements_used.forward_zoom_targets is missing",
    ]


def test_nullable_fields_accept_null() -> None:
    card = build(bg_on=False)
    assert card["background_binding"]["bg_id"] is None
    assert problems(card) == []


def test_undeclared_keys_are_rejected_but_excluded_keys_allowed() -> None:
    card = build()
    card["render_strategy"]["source"] = "fallback"
    card["extra"] = 1
    card["_card_metadata"] = {"builder": "x"}
    assert problems(card) == [
        "render_strategy.source is not a declared field",
        "extra is not a declared field",
    ]


def test_card_must_be_an_object() -> None:
    assert problems("not a dict") == ["card must be an object, got str"]


@pytest.mark.parametrize(
    "bad", ["DEADBEEFDEADBEEF", "NOT_HEX_VALUE!!!", "deadbeef", "deadbeefdeadbeef0", None, 1234]
)
def test_hash_must_be_16_lowercase_hex(bad: Any) -> None:
    assert problems(build(), bad) == [f"hash {bad!r} must be exactly 16 lowercase hex characters"]


def test_in_card_hash_key_is_checked_when_present() -> None:
    card = build()
    card["render_prompt_card_hash"] = "DEADBEEFDEADBEEF"
    assert problems(card) == [
        "render_prompt_card_hash 'DEADBEEFDEADBEEF' must be exactly 16 lowercase hex characters"
    ]
    card["render_prompt_card_hash"] = "deadbeef" * 2
    assert problems(card) == []
    del card["render_prompt_card_hash"]
    assert problems(card) == []
