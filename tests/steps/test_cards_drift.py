"""Drift, the card/verify_card steps and the rendered prompts (seed 002, Tasks 18-20)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion

from runner.errors import StepFailure
from runner.expr import render_template, template_environment
from runner.state.objects import ObjectStore
from runner.steps.base import ResultStatus, StepContext, StepEnv, StepResult
from runner.steps.card import CardStep
from runner.steps.cards import (
    DriftReport,
    build_card,
    card_block,
    check_shape,
    detect_drift,
    load_spec,
)
from runner.steps.verify_card import VerifyCardStep
from tests.steps.test_cards_builder import REPO, SPEC_PATH, fixed_element, make_inputs, spec

SPEC_REL = "cards/render_prompt_card.yaml"
EXAMPLES = REPO / "examples" / "scene-detail" / "scenes.yaml"


def drift(old: dict[str, Any], new: dict[str, Any]) -> DriftReport:
    built = build_card(spec(), old)
    return detect_drift(spec(), built.card, built.hash, new)


# -- detect_drift ----------------------------------------------------------------------------------


def test_no_drift_when_inputs_are_unchanged() -> None:
    built = build_card(spec(), make_inputs())
    assert detect_drift(spec(), built.card, built.hash, make_inputs()) == DriftReport(
        drifted=False, fields=[], problems=[], stored_hash=built.hash, current_hash=built.hash
    )


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"bg_owned": ["door", "window", "TV"]}, ["background_binding.owned_objects"]),
        (
            {"outlook_pairs": [{"character_id": "C01", "outlook_id": "O03"}]},
            ["id_policy.allowed_outlook_pairs", "asset_requirements.required_refs"],
        ),
        ({"camera": "low angle medium shot"}, ["render_strategy.camera_direction"]),
        (
            {"camera": "extreme close-up of hand"},
            [
                "render_strategy.framing_scale",
                "render_strategy.camera_direction",
                "background_binding.mode",
                "background_binding.reference_usage",
                "background_binding.owned_objects",
                "background_binding.camera_reference",
                "background_binding.close_framing_skips_background_ref",
                "background_binding.constraints",
                "asset_requirements.required_refs",
                "asset_requirements.forbidden_refs",
                "asset_requirements.readiness_policy",
            ],
        ),
        ({"shot_index": 5}, ["shot_key.shot_index"]),
        ({"fixed_elements": [fixed_element("a")]}, ["continuity_elements_used.fixed_elements"]),
        (
            {"perception_mode": "mirror"},
            ["render_strategy.perception_mode", "id_policy.constraints"],
        ),
    ],
)
def test_drift_names_exactly_the_changed_fields(change: dict[str, Any], fields: list[str]) -> None:
    report = drift(make_inputs(), make_inputs(**change))
    assert report.drifted is True
    assert report.problems == []
    assert report.fields == fields
    assert report.current_hash == build_card(spec(), make_inputs(**change)).hash
    assert report.stored_hash != report.current_hash


def _zoom(n: int, usage: str = "zoom_in_detail") -> dict[str, Any]:
    targets = [
        {"scene_index": 12, "shot_index": 5 + i, "description": f"f#{i}", "keep_elements": []}
        for i in range(n)
    ]
    return make_inputs(
        forward_zoom_targets=targets,
        previous_shot_refs=[
            {"scene_index": 12, "shot_index": 3, "ref_usage": usage, "keep_elements": []}
        ],
    )


def test_forward_zoom_count_and_ref_usage_changes_drift() -> None:
    assert drift(_zoom(7), _zoom(8)).fields == ["continuity_elements_used.forward_zoom_targets"]
    assert drift(_zoom(2), _zoom(2, "continuation")).fields == [
        "continuity_elements_used.previous_shot_refs"
    ]


def test_permuted_inputs_do_not_drift() -> None:
    old = make_inputs(visible_entities=["C01", "C02"], bg_owned=["door", "window"])
    new = make_inputs(visible_entities=["C02", "C01"], bg_owned=["window", "door"])
    assert drift(old, new).drifted is False


def test_invalid_or_missing_stored_card_is_a_problem_not_a_comparison() -> None:
    built = build_card(spec(), make_inputs())
    missing = detect_drift(spec(), None, None, make_inputs())
    assert missing.problems == [
        "hash None must be exactly 16 lowercase hex characters",
        "card must be an object, got NoneType",
    ]
    assert missing.drifted is False
    bad = dict(built.card, schema_version=True)
    assert detect_drift(spec(), bad, built.hash, make_inputs()).problems == [
        "schema_version True must be an int (a bool is not an int)"
    ]
    upper = detect_drift(spec(), built.card, built.hash.upper(), make_inputs())
    assert upper.problems == [
        f"hash {built.hash.upper()!r} must be exactly 16 lowercase hex characters"
    ]


def test_edited_stored_card_no_longer_matches_its_hash() -> None:
    built = build_card(spec(), make_inputs())
    edited = json.loads(json.dumps(built.card))
    edited["render_strategy"]["lighting_mood"] = "bright noon"
    report = detect_drift(spec(), edited, built.hash, make_inputs())
    own = build_card(
        spec(),
        make_inputs(
            staging={"camera_direction": "medium shot of doorway", "lighting_mood": "bright noon"}
        ),
    )
    assert report.problems == [
        f"stored hash {built.hash} does not match the stored card (its "
        f"content hashes to {own.hash})"
    ]


def test_current_inputs_breaking_the_contract_are_reported() -> None:
    report = drift(make_inputs(), make_inputs(visible_entities=None))
    assert report.problems == [
        'current inputs: RenderPromptCard shot_key={"scene_index":12,"shot_index":4}: '
        "visible_entities: required input is null (pass [] for an intentionally empty list; a "
        "missing value is never treated as empty)"
    ]


def test_schema_version_bump_invalidates_stored_cards(tmp_path: Path) -> None:
    bumped = tmp_path / "card.yaml"
    bumped.write_text(
        SPEC_PATH.read_text(encoding="utf-8").replace("schema_version: 1", "schema_version: 2"),
        encoding="utf-8",
    )
    built = build_card(spec(), make_inputs())
    v2 = load_spec(bumped)
    report = detect_drift(v2, built.card, built.hash, make_inputs())
    assert report.problems == ["schema_version 1 != 2 (the spec's)"]
    assert build_card(v2, make_inputs()).hash != built.hash


# -- the step types ------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cards").mkdir()
    shutil.copy(SPEC_PATH, tmp_path / SPEC_REL)
    return tmp_path


def run(step: Any, root: Path, args: dict[str, Any]) -> StepResult:
    env = StepEnv(root=root, state_dir=root / ".runner", objects=ObjectStore(root / "objects"))
    result: StepResult = asyncio.run(step.run(StepContext(env, "run1", "s"), args))
    return result


def test_card_step_output(project: Path) -> None:
    result = run(CardStep(), project, {"spec": SPEC_REL, "inputs": make_inputs()})
    built = build_card(spec(), make_inputs())
    assert result.status is ResultStatus.OK
    assert result.output == {
        "card": built.card,
        "hash": built.hash,
        "title": "RenderPromptCard",
        "schema_version": 1,
    }
    assert CardStep().reads({"spec": SPEC_REL, "inputs": {}}, root=project) == [SPEC_REL]


def test_card_step_contract_violation_fails_the_step(project: Path) -> None:
    with pytest.raises(StepFailure) as ei:
        run(CardStep(), project, {"spec": SPEC_REL, "inputs": make_inputs(outlook_pairs=None)})
    assert ei.value.reason == (
        'card contract violated: RenderPromptCard shot_key={"scene_index":12,"shot_index":4}: '
        "outlook_pairs: required input is null (pass [] for an intentionally empty list; a "
        "missing value is never treated as empty)"
    )


def test_verify_card_ok_partial_and_failed(project: Path) -> None:
    stored = run(CardStep(), project, {"spec": SPEC_REL, "inputs": make_inputs()}).output
    ok = run(VerifyCardStep(), project, {"spec": SPEC_REL, "card": stored, "inputs": make_inputs()})
    assert (ok.status, ok.output, ok.report) == (
        ResultStatus.OK,
        {"verified": True, "hash": stored["hash"]},
        None,
    )

    changed = make_inputs(bg_owned=["door", "window", "TV"])
    current = build_card(spec(), changed).hash
    partial = run(VerifyCardStep(), project, {"spec": SPEC_REL, "card": stored, "inputs": changed})
    assert partial.status is ResultStatus.PARTIAL
    assert partial.report == {
        "drifted_fields": ["background_binding.owned_objects"],
        "stored_hash": stored["hash"],
        "current_hash": current,
    }
    assert partial.output == {"verified": False, "hash": stored["hash"], "current_hash": current}

    broken = dict(stored, hash=stored["hash"].upper())
    with pytest.raises(StepFailure) as ei:
        run(VerifyCardStep(), project, {"spec": SPEC_REL, "card": broken, "inputs": changed})
    assert ei.value.reason == (
        f"RenderPromptCard is invalid: hash {broken['hash']!r} must be "
        "exactly 16 lowercase hex characters"
    )


def test_step_validate_rejects_a_broken_spec(project: Path) -> None:
    from runner.errors import InvalidPipeline

    (project / "cards" / "bad.yaml").write_text("title: X\n", encoding="utf-8")
    with pytest.raises(InvalidPipeline, match=r"bad\.yaml:1:1"):
        CardStep().validate({"spec": "cards/bad.yaml"}, root=project, where=None)
    with pytest.raises(InvalidPipeline, match="card spec not found"):
        VerifyCardStep().validate({"spec": "cards/none.yaml"}, root=project, where=None)


# -- the prompts ---------------------------------------------------------------------------------


def _examples() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLES.read_text(encoding="utf-8"))
    return data


def _shot_inputs(shot: dict[str, Any]) -> dict[str, Any]:
    return {k: shot[k] for k in spec().inputs}


def render_user(shot: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    built = build_card(spec(), _shot_inputs(shot))
    output = {
        "card": built.card,
        "hash": built.hash,
        "title": "RenderPromptCard",
        "schema_version": 1,
    }
    scene = next(s for s in _examples()["scenes"] if s["scene_index"] == shot["scene_index"])
    env = template_environment(REPO, filters={"card_block": card_block})
    text = render_template(
        env,
        name="prompts/scene_detail/16/user.j2",
        variables={"card": output, "scene": scene, "shot": shot},
    )
    return text, output


def test_card_block_forms() -> None:
    built = build_card(spec(), make_inputs())
    output = {
        "card": built.card,
        "hash": built.hash,
        "title": "RenderPromptCard",
        "schema_version": 1,
    }
    block = card_block(built.card, "RenderPromptCard", 1)
    assert block == card_block(output)
    assert block.startswith("[RenderPromptCard v1]\n{")
    assert block.endswith("}\n\n")
    assert json.loads(block.split("\n")[1]) == built.card
    with pytest.raises(ValueError, match="card step output"):
        card_block({"hash": "x"})


def test_every_example_shot_builds_and_renders_one_card_block_first() -> None:
    shots = _examples()["shots"]
    assert len(shots) == 6
    for shot in shots:
        text, output = render_user(shot)
        assert text.count("[RenderPromptCard v1]") == 1
        assert text.startswith(card_block(output) + "[Minimal narrative input]\n")
        parsed = json.loads(text.split("\n")[1])
        assert check_shape(spec(), parsed, output["hash"]) == []


def test_eight_zoom_targets_and_six_keep_elements_reach_the_prompt_whole() -> None:
    shot = _examples()["shots"][0]
    text, output = render_user(shot)
    targets = output["card"]["continuity_elements_used"]["forward_zoom_targets"]
    assert targets == shot["forward_zoom_targets"]
    assert [len(t["keep_elements"]) for t in targets] == [6] * 8
    parsed = json.loads(text.split("\n")[1])
    assert parsed["continuity_elements_used"]["forward_zoom_targets"] == targets
    assert "문손잡이가 보여야 한다" in text and "\\u" not in text


def test_korean_camera_directions_in_the_examples() -> None:
    by_key = {
        (s["scene_index"], s["shot_index"]): build_card(spec(), _shot_inputs(s)).card
        for s in _examples()["shots"]
    }
    assert by_key[(13, 1)]["render_strategy"]["framing_scale"] == "close"
    rs = by_key[(13, 1)]["render_strategy"]
    assert rs["camera_direction"] == "식탁 위 손가락이 가득 찬 클로즈업"
    assert by_key[(13, 2)]["render_strategy"]["framing_scale"] == "insert"
    assert by_key[(14, 1)]["background_binding"]["mode"] == "background_mode_off"
    assert by_key[(13, 3)]["id_policy"]["constraints"][-1].startswith("this shot's perception")


def test_system_prompt_opens_with_the_card_wins_section() -> None:
    text = (REPO / "prompts" / "scene_detail" / "16" / "system.j2").read_text(encoding="utf-8")
    first = text.split("\n## ")[0]
    assert first.startswith("## Read RenderPromptCard first (PRIMARY CONTRACT)\n")
    assert "primary contract" in first
    assert "the card wins" in first
    assert text.index("## Read RenderPromptCard first") < text.index("## Legacy compatibility")


def test_rendered_prompts_snapshot(snapshot: SnapshotAssertion) -> None:
    env = template_environment(REPO, filters={"card_block": card_block})
    system = render_template(env, name="prompts/scene_detail/16/system.j2", variables={})
    users = [render_user(shot)[0] for shot in _examples()["shots"][:3]]
    assert system == snapshot(name="system")
    assert users == snapshot(name="user")
