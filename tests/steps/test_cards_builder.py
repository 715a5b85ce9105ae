"""RenderPromptCard builder branches (seed 002, Tasks 2-7, 9.5 and the Task 20 variants)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from runner.steps.cards import CardSpec, ContractViolation, build_card, check_shape, load_spec

REPO = Path(__file__).resolve().parent.parent.parent
SPEC_PATH = REPO / "cards" / "render_prompt_card.yaml"
_DEFAULT: Any = object()  # "not given": only then a default applies (None and [] are kept)

REQUIRED_LISTS = [
    "visible_entities",
    "outlook_pairs",
    "bg_owned",
    "fixed_elements",
    "previous_shot_refs",
    "forward_zoom_targets",
]
RS_CONSTRAINTS = [
    "one prompt captures one still moment",
    "do not combine full-body framing and body-part close-up in one frame",
]
ID_CONSTRAINTS = [
    "visible real people with outfit binding use C##O## composite IDs",
    "do not use C##O## for a reproduced face inside a screen, photo, poster, mirror, or "
    "reflection — use a common noun instead",
    "do not use C##O## for isolated body-part focus — use a common noun (hand / eye / lip / etc.)",
]
REFLECTION_CONSTRAINT = (
    "this shot's perception_mode involves a reflective/projected surface — all reproduced faces "
    "use common nouns even if the source identity is known"
)
CLOSE_BG_CONSTRAINTS = [
    "this shot is close framing — do not mention the reference image, the existing room, or any "
    "chain_bg owned object",
    "the background ref is intentionally skipped (mode = skipped_close_framing); compose the "
    "close subject without anchoring to the wider room",
]
OWNED_CONSTRAINTS = [
    "do not create new objects in the owned_objects list — they are already drawn in the "
    "background reference",
    "if focusing on an owned object, anchor it as 'from the reference' (e.g., 'the door from "
    "the reference')",
]
CAMERA_CONSTRAINT = (
    "match the reference image's camera_position and framing — do not rotate, "
    "change height, or zoom independently"
)


def spec() -> CardSpec:
    return load_spec(SPEC_PATH)


def make_inputs(
    *,
    close: bool = False,
    bg_on: bool = True,
    camera: str | None = None,
    outlook_pairs: Any = _DEFAULT,
    fixed_elements: Any = _DEFAULT,
    **overrides: Any,
) -> dict[str, Any]:
    """Inputs of one shot; `outlook_pairs=[]` stays [] and `=None` stays None (never defaulted)."""
    cam = camera or ("extreme close-up of hand" if close else "medium shot of doorway")
    inputs: dict[str, Any] = {
        "scene_index": 12,
        "shot_index": 4,
        "shot": {"camera_direction": cam, "primary_subject": "the observer at the doorway"},
        "staging": {"camera_direction": cam, "lighting_mood": "warm dim"},
        "perception_mode": None,
        "visible_entities": ["C01"],
        "outlook_pairs": (
            [{"character_id": "C01", "outlook_id": "O02"}]
            if outlook_pairs is _DEFAULT
            else outlook_pairs
        ),
        "background_mode_on": bg_on,
        "bg_id": "cb_main_room" if bg_on else None,
        "bg_owned": ["door", "window"] if bg_on else [],
        "bg_camera_meta": {"camera_position": "southeast doorway"} if bg_on else None,
        "fixed_elements": [] if fixed_elements is _DEFAULT else fixed_elements,
        "previous_shot_refs": [],
        "forward_zoom_targets": [],
    }
    inputs.update(overrides)
    return inputs


def build(**kw: Any) -> dict[str, Any]:
    return build_card(spec(), make_inputs(**kw)).card


def fixed_element(element_id: str = "body_full_pose", description: str = "x") -> dict[str, Any]:
    return {
        "element_id": element_id,
        "element_type": "character_state",
        "character_name": "C02",
        "description": description,
        "applies_to_shots": [
            {"scene_index": 12, "shot_index": 3},
            {"scene_index": 12, "shot_index": 4},
        ],
        "source_facts": ["scene narration: 'she lay still'"],
        "visual_inferences": ["lighting falls from window onto left shoulder"],
        "creative_decisions": ["camera respects 180-degree line"],
        "confidence": "high",
    }


# -- Task 2: the envelope ------------------------------------------------------------------------


def test_envelope_has_exactly_schema_version_key_and_five_fields() -> None:
    card = build()
    assert list(card) == [
        "schema_version",
        "shot_key",
        "render_strategy",
        "id_policy",
        "background_binding",
        "continuity_elements_used",
        "asset_requirements",
    ]
    assert card["schema_version"] == 1
    assert card["shot_key"] == {"scene_index": 12, "shot_index": 4}


# -- Task 3: render_strategy ---------------------------------------------------------------------


def test_default_mode_direct_and_wide_shot_is_medium() -> None:
    card = build(
        camera="wide shot of room",
        staging={"camera_direction": "wide shot of room", "lighting_mood": "warm dim"},
    )
    assert card["render_strategy"] == {
        "mode": "direct",
        "primary_subject": "the observer at the doorway",
        "framing_scale": "medium",
        "moment_lock": "single still moment from the selected shot only",
        "camera_direction": "wide shot of room",
        "lighting_mood": "warm dim",
        "perception_mode": "direct",
        "constraints": RS_CONSTRAINTS,
    }


@pytest.mark.parametrize(
    ("camera", "scale"),
    [
        ("extreme close-up of hand", "close"),
        ("손가락이 가득 찬 클로즈업", "close"),
        ("근접 촬영: 입술", "close"),
        ("insert shot of clock face", "insert"),
        ("인서트: 벽시계 초침", "insert"),
        ("medium shot of doorway", "medium"),
    ],
)
def test_framing_scale_from_the_named_patterns(camera: str, scale: str) -> None:
    assert build(camera=camera)["render_strategy"]["framing_scale"] == scale


def test_staging_takes_precedence_over_the_shot_camera() -> None:
    card = build(
        shot={"camera_direction": "medium shot"},
        staging={"camera_direction": "extreme close-up", "lighting_mood": "harsh"},
    )
    assert card["render_strategy"]["camera_direction"] == "extreme close-up"
    assert card["render_strategy"]["framing_scale"] == "close"


def test_staging_required_but_missing_is_a_contract_violation() -> None:
    with pytest.raises(ContractViolation) as ei:
        build(shot={"camera_direction": ""}, staging=None)
    exc = ei.value
    assert (exc.card, exc.key, exc.field) == (
        "RenderPromptCard",
        {"scene_index": 12, "shot_index": 4},
        "render_strategy.mode",
    )
    assert str(exc) == (
        'RenderPromptCard shot_key={"scene_index":12,"shot_index":4}: render_strategy.mode: '
        "staging is required but missing; set shot.staging_not_applicable: true when the shot "
        "has no staging on purpose"
    )


def test_staging_explicitly_not_applicable_gives_mode_not_applicable() -> None:
    card = build(shot={"camera_direction": "", "staging_not_applicable": True}, staging=None)
    rs = card["render_strategy"]
    assert (rs["mode"], rs["camera_direction"], rs["lighting_mood"]) == ("not_applicable", "", "")
    assert "source" not in rs  # no "fallback" marker exists at all


def test_perception_mode_propagated_and_null_means_direct() -> None:
    assert build(perception_mode="memory")["render_strategy"]["perception_mode"] == "memory"
    assert build(perception_mode=None)["render_strategy"]["perception_mode"] == "direct"


def test_primary_subject_from_the_shot() -> None:
    assert build()["render_strategy"]["primary_subject"] == "the observer at the doorway"


def test_not_applicable_is_an_allowed_render_mode() -> None:
    mode = next(f for f in spec().fields() if f.path == "render_strategy.mode")
    assert mode.allowed == (
        "direct",
        "simplify",
        "partial_focus",
        "reframe",
        "anchored_reference",
        "close_insert",
        "not_applicable",
    )


# -- Task 4: id_policy ---------------------------------------------------------------------------


def test_id_policy_full() -> None:
    card = build(
        visible_entities=["P03", "C02", "L01", "C01"],
        outlook_pairs=[
            {"character_id": "C02", "outlook_id": "O01"},
            {"character_id": "C01", "outlook_id": "O02"},
        ],
    )
    assert card["id_policy"] == {
        "allowed_base_entity_ids": ["C01", "C02", "L01", "P03"],
        "allowed_outlook_pairs": [
            {"character_id": "C01", "outlook_id": "O02"},
            {"character_id": "C02", "outlook_id": "O01"},
        ],
        "must_use_composite_character_ids": True,
        "common_noun_required_when": [
            "body-part close-up",
            "photo/poster/screen/mirror/reflection/projection depiction",
            "unregistered extra",
        ],
        "demographic_fallback_required": True,
        "constraints": ID_CONSTRAINTS,
    }


@pytest.mark.parametrize("mode", ["reflection", "Mirror", "through_device", "projection"])
def test_reflective_perception_adds_a_constraint(mode: str) -> None:
    assert build(perception_mode=mode)["id_policy"]["constraints"] == [
        *ID_CONSTRAINTS,
        REFLECTION_CONSTRAINT,
    ]


def test_explicit_empty_entities_and_pairs_are_valid() -> None:
    card = build(visible_entities=[], outlook_pairs=[])
    assert card["id_policy"]["allowed_base_entity_ids"] == []
    assert card["id_policy"]["allowed_outlook_pairs"] == []
    assert card["id_policy"]["must_use_composite_character_ids"] is True
    assert card["id_policy"]["demographic_fallback_required"] is True


# -- None vs [] for every required input ----------------------------------------------------------


@pytest.mark.parametrize("name", REQUIRED_LISTS)
def test_required_list_none_is_a_violation_and_empty_is_valid(name: str) -> None:
    with pytest.raises(ContractViolation) as ei:
        build(**{name: None})
    assert ei.value.field == name
    assert str(ei.value) == (
        f'RenderPromptCard shot_key={{"scene_index":12,"shot_index":4}}: {name}: required input '
        "is null (pass [] for an intentionally empty list; a missing value is never treated as "
        "empty)"
    )
    assert check_shape(spec(), build(**{name: []}), "0" * 16) == []


@pytest.mark.parametrize(
    "name", ["scene_index", "shot_index", "shot", "background_mode_on", *REQUIRED_LISTS]
)
def test_required_input_left_out_is_a_violation(name: str) -> None:
    inputs = make_inputs()
    del inputs[name]
    with pytest.raises(ContractViolation) as ei:
        build_card(spec(), inputs)
    assert ei.value.field == name
    assert "required input is missing" in str(ei.value)


def test_wrong_input_type_and_undeclared_input_are_violations() -> None:
    with pytest.raises(
        ContractViolation,
        match=r"visible_entities: input is string 'C01', "
        r"expected list",
    ):
        build(visible_entities="C01")
    with pytest.raises(ContractViolation, match="background_mode_on: input is int 1, expected"):
        build(background_mode_on=1)
    with pytest.raises(ContractViolation, match="bg_guide: is not a declared input"):
        build(bg_guide="g")


def test_key_unknown_when_the_key_inputs_are_broken() -> None:
    with pytest.raises(ContractViolation) as ei:
        build(scene_index=None)
    assert ei.value.key is None
    assert str(ei.value).startswith("RenderPromptCard shot_key=?: scene_index: required input")


# -- Task 5: background_binding ------------------------------------------------------------------


def test_background_mode_off_short_circuits() -> None:
    card = build(
        bg_on=False,
        bg_id="cb_main_room",
        bg_owned=["door"],
        bg_camera_meta={"camera_position": "x"},
    )
    assert card["background_binding"] == {
        "mode": "background_mode_off",
        "bg_id": None,
        "reference_usage": "none",
        "owned_objects": [],
        "camera_reference": None,
        "close_framing_skips_background_ref": False,
        "constraints": [
            "background_mode is off — no chain_bg reference is attached and no "
            "owned-object preservation is required"
        ],
    }


def test_close_framing_skips_owned_and_camera() -> None:
    card = build(close=True)
    assert card["background_binding"] == {
        "mode": "skipped_close_framing",
        "bg_id": "cb_main_room",
        "reference_usage": "skipped_close_framing",
        "owned_objects": [],
        "camera_reference": None,
        "close_framing_skips_background_ref": True,
        "constraints": CLOSE_BG_CONSTRAINTS,
    }


def test_non_close_with_background_keeps_owned_and_camera() -> None:
    card = build(
        bg_owned=["window", "TV", "door"],
        bg_camera_meta={
            "camera_position": "southeast doorway",
            "camera_height": "eye-level standing",
            "lens_hint": "35mm",
            "framing_notes": "TV at edge",
        },
    )
    assert card["background_binding"] == {
        "mode": "background_ref_attached",
        "bg_id": "cb_main_room",
        "reference_usage": "exact_background",
        "owned_objects": ["TV", "door", "window"],
        "camera_reference": {
            "camera_position": "southeast doorway",
            "camera_height": "eye-level standing",
            "lens_hint": "35mm",
            "framing_notes": "TV at edge",
        },
        "close_framing_skips_background_ref": False,
        "constraints": [*OWNED_CONSTRAINTS, CAMERA_CONSTRAINT],
    }


def test_no_background_id_is_not_applicable() -> None:
    card = build(bg_id=None, bg_owned=[], bg_camera_meta=None)
    assert card["background_binding"]["mode"] == "not_applicable"
    assert card["background_binding"]["bg_id"] is None
    assert card["background_binding"]["owned_objects"] == []
    assert card["background_binding"]["constraints"] == [
        "no chain_bg is bound to this shot — describe the location freely without referencing a "
        "background image"
    ]


def test_attached_without_owned_or_camera_has_no_constraints() -> None:
    card = build(bg_owned=[], bg_camera_meta={})
    assert card["background_binding"]["constraints"] == []
    assert card["background_binding"]["camera_reference"] is None


def test_inputs_are_not_mutated() -> None:
    inputs = make_inputs(
        bg_owned=["window", "door"],
        fixed_elements=[fixed_element("b"), fixed_element("a")],
        previous_shot_refs=[{"scene_index": 1, "shot_index": 1}],
        forward_zoom_targets=[{"scene_index": 1, "shot_index": 2}],
    )
    before = copy.deepcopy(inputs)
    card = build_card(spec(), inputs).card
    assert inputs == before
    card["continuity_elements_used"]["fixed_elements"][0]["description"] = "changed"
    assert inputs == before  # the card shares nothing with the inputs


# -- Task 6: continuity_elements_used ------------------------------------------------------------


def test_full_continuity_kept_lossless() -> None:
    fe = [fixed_element()]
    psr = [{"scene_index": 12, "shot_index": 3, "ref_usage": "zoom_in_detail", "keep_elements": []}]
    fzt = [
        {
            "scene_index": 12,
            "shot_index": 5,
            "description": "follow-up close-up target must be visible",
            "keep_elements": [],
        }
    ]
    card = build(fixed_elements=fe, previous_shot_refs=psr, forward_zoom_targets=fzt)
    assert card["continuity_elements_used"] == {
        "fixed_elements": fe,
        "previous_shot_refs": psr,
        "forward_zoom_targets": fzt,
        "constraints": [
            "fixed_elements are continuity inputs derived from prior shots — treat them as "
            "binding context, not as source facts to be invented",
            "previous_shot_refs with ref_usage='zoom_in_detail' must preserve the same moment, "
            "the same space, and the same lighting as the prior shot",
        ],
    }


def test_all_empty_continuity_is_valid() -> None:
    c = build()["continuity_elements_used"]
    assert (c["fixed_elements"], c["previous_shot_refs"], c["forward_zoom_targets"]) == ([], [], [])


def test_long_text_and_korean_are_not_truncated() -> None:
    long_kor = "여자가 방 안에 누워 있다. " * 80
    long_en = "A " * 300 + "long description"
    card = build(fixed_elements=[fixed_element("a", long_en), fixed_element("b", long_kor)])
    got = card["continuity_elements_used"]["fixed_elements"]
    assert [e["description"] for e in got] == [long_en, long_kor]


def test_forward_zoom_full_list_no_cap() -> None:
    fzt = [
        {
            "scene_index": 12,
            "shot_index": 5 + i,
            "description": f"forward zoom target #{i}",
            "keep_elements": [f"element_{j}" for j in range(7)],
        }
        for i in range(8)
    ]
    card = build(forward_zoom_targets=fzt)
    assert card["continuity_elements_used"]["forward_zoom_targets"] == fzt
    assert [len(t["keep_elements"]) for t in fzt] == [7] * 8


def test_previous_shot_refs_keep_their_order() -> None:
    psr = [
        {"scene_index": 12, "shot_index": 3, "ref_usage": "continuation"},
        {"scene_index": 12, "shot_index": 1, "ref_usage": "zoom_in_detail"},
    ]
    assert build(previous_shot_refs=psr)["continuity_elements_used"]["previous_shot_refs"] == psr


def test_fixed_element_without_its_sort_key_is_a_violation() -> None:
    with pytest.raises(
        ContractViolation,
        match=r"continuity_elements_used\.fixed_elements: "
        r"element lacks 'element_type'",
    ):
        build(fixed_elements=[{"element_id": "x"}])


# -- Task 7: asset_requirements ------------------------------------------------------------------


def test_full_assets_required_only() -> None:
    card = build(
        visible_entities=["C01", "C02", "L01", "P03"],
        outlook_pairs=[
            {"character_id": "C01", "outlook_id": "O02"},
            {"character_id": "C02", "outlook_id": "O01"},
        ],
    )
    assert card["asset_requirements"] == {
        "required_refs": [
            {"kind": "background", "id": "cb_main_room", "policy": "required"},
            {"kind": "character_outlook", "id": "C01O02", "policy": "required"},
            {"kind": "character_outlook", "id": "C02O01", "policy": "required"},
        ],
        "forbidden_refs": [],
        "readiness_policy": "block_if_missing",
        "constraints": [
            "do not imply or describe a reference image that is not listed in required_refs "
            "(no phantom references)",
            "if a required character_outlook ref is missing, scene image generation must block "
            "before the image stage",
        ],
    }


def test_mixed_close_framing_forbids_background_keeps_outlook() -> None:
    a = build(close=True)["asset_requirements"]
    assert a["required_refs"] == [
        {"kind": "character_outlook", "id": "C01O02", "policy": "required"}
    ]
    assert a["forbidden_refs"] == [
        {"kind": "background", "reason": "close framing skips chain_bg reference"}
    ]
    assert a["readiness_policy"] == "skipped_by_policy"


def test_forbidden_only_close_framing_without_outlook() -> None:
    inputs = make_inputs(close=True, outlook_pairs=[])
    assert inputs["outlook_pairs"] == []  # the helper kept the explicit []
    a = build_card(spec(), inputs).card["asset_requirements"]
    assert a["required_refs"] == []
    assert a["forbidden_refs"] == [
        {"kind": "background", "reason": "close framing skips chain_bg reference"}
    ]
    assert a["readiness_policy"] == "skipped_by_policy"


def test_background_mode_off_assets() -> None:
    a = build(bg_on=False)["asset_requirements"]
    assert a["required_refs"] == [
        {"kind": "character_outlook", "id": "C01O02", "policy": "required"}
    ]
    assert a["forbidden_refs"] == []
    assert a["readiness_policy"] == "not_applicable"


def test_no_outlook_pair_and_no_background_means_nothing_required() -> None:
    a = build(bg_on=False, outlook_pairs=[])["asset_requirements"]
    assert (a["required_refs"], a["readiness_policy"]) == ([], "not_applicable")


def test_outlook_pair_without_ids_is_a_violation() -> None:
    with pytest.raises(ContractViolation) as ei:
        build(outlook_pairs=[{"character_id": "C01"}])
    assert ei.value.field == "id_policy.allowed_outlook_pairs"


# -- Task 9.5 / Task 20: whole-card consistency ---------------------------------------------------


def test_full_round_trip() -> None:
    card = build()
    assert card["render_strategy"]["framing_scale"] == "medium"
    assert card["id_policy"]["allowed_base_entity_ids"] == ["C01"]
    assert card["background_binding"]["bg_id"] == "cb_main_room"
    assert card["asset_requirements"]["readiness_policy"] == "block_if_missing"
    assert check_shape(spec(), card, "0123456789abcdef") == []


def test_close_framing_propagates_to_every_field() -> None:
    card = build(close=True)
    assert card["render_strategy"]["framing_scale"] == "close"
    assert card["background_binding"]["mode"] == "skipped_close_framing"
    assert card["background_binding"]["owned_objects"] == []
    assert card["asset_requirements"]["readiness_policy"] == "skipped_by_policy"


def test_multi_outlook() -> None:
    card = build(
        outlook_pairs=[
            {"character_id": "C02", "outlook_id": "O01"},
            {"character_id": "C01", "outlook_id": "O02"},
        ]
    )
    assert len(card["id_policy"]["allowed_outlook_pairs"]) == 2
    ids = [
        r["id"]
        for r in card["asset_requirements"]["required_refs"]
        if r["kind"] == "character_outlook"
    ]
    assert ids == ["C01O02", "C02O01"]


def test_slow_path_gives_the_same_cards_as_the_one_template_path() -> None:
    s = spec()
    cases = [
        make_inputs(),
        make_inputs(close=True),
        make_inputs(bg_on=False),
        make_inputs(perception_mode="mirror", bg_camera_meta={}),
        make_inputs(shot={"camera_direction": "", "staging_not_applicable": True}, staging=None),
    ]
    fast = [build_card(s, c) for c in cases]
    saved, s.fast = s.fast, False
    try:
        slow = [build_card(s, c) for c in cases]
    finally:
        s.fast = saved
    assert fast == slow
