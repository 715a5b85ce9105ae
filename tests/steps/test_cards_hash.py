"""Card hash: canonical JSON, exclusions, permutation invariance (seed 002, Task 8)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.state.canonical import canonical_json
from runner.steps.cards import build_card, card_hash
from tests.steps.test_cards_builder import build, fixed_element, make_inputs, spec

# The hash of make_inputs()'s card, pinned: a change here means every stored card drifts.
PINNED = "acf13bf2f48f21f5"


def test_hash_is_16_lowercase_hex_of_sha256_over_canonical_json() -> None:
    built = build_card(spec(), make_inputs())
    text = json.dumps(built.card, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert built.hash == hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    assert built.hash == card_hash(spec(), built.card)
    assert built.hash == PINNED


def test_deterministic_and_key_order_independent() -> None:
    c1 = build()
    c2 = {k: c1[k] for k in reversed(list(c1))}
    assert card_hash(spec(), c1) == card_hash(spec(), c2) == card_hash(spec(), build())


def _changed(mutate: Any) -> bool:
    c1 = build()
    c2 = copy.deepcopy(c1)
    mutate(c2)
    return card_hash(spec(), c1) != card_hash(spec(), c2)


def test_semantic_changes_change_the_hash() -> None:
    assert _changed(lambda c: c["background_binding"]["owned_objects"].append("TV"))
    assert _changed(lambda c: c["render_strategy"].update(camera_direction="extreme close-up"))
    assert _changed(
        lambda c: c["id_policy"].update(
            allowed_outlook_pairs=[{"character_id": "C01", "outlook_id": "O03"}]
        )
    )
    assert _changed(
        lambda c: c["continuity_elements_used"]["fixed_elements"].append(
            {"element_id": "x", "element_type": "scene_state", "description": "y"}
        )
    )


def test_schema_version_and_key_are_in_the_hash() -> None:
    assert _changed(lambda c: c.update(schema_version=99))
    assert _changed(lambda c: c.update(shot_key={"scene_index": 99, "shot_index": 99}))
    assert _changed(lambda c: c["shot_key"].update(shot_index=5))


def test_stored_hash_and_card_metadata_are_excluded() -> None:
    assert not _changed(lambda c: c.update(render_prompt_card_hash="deadbeef" * 2))
    assert not _changed(
        lambda c: c.update(
            _card_metadata={"build_timestamp": "2026-05-04T12:00:00Z", "builder_version": "g4.1.r1"}
        )
    )
    c1, c2 = build(), build()
    c1["_card_metadata"] = {"build_timestamp": "A"}
    c2["_card_metadata"] = {"build_timestamp": "B"}
    assert card_hash(spec(), c1) == card_hash(spec(), c2)


def test_korean_text_is_hashed_as_utf8_not_escaped() -> None:
    card = build(fixed_elements=[fixed_element("x", "여자가 옆으로 누워 있다")])
    assert "여자가 옆으로 누워 있다" in canonical_json(card)
    assert "\\u" not in canonical_json(card)
    assert card_hash(spec(), card) != card_hash(
        spec(), build(fixed_elements=[fixed_element("x", "여자가 옆으로 누워 있었다")])
    )


def test_each_unordered_list_is_permutation_invariant_in_a_stored_card() -> None:
    card = build(
        close=False,
        outlook_pairs=[
            {"character_id": "C01", "outlook_id": "O02"},
            {"character_id": "C02", "outlook_id": "O01"},
        ],
        visible_entities=["C01", "C02"],
        fixed_elements=[fixed_element("a"), fixed_element("b")],
    )
    card["asset_requirements"]["forbidden_refs"] = [
        {"kind": "background", "reason": "close framing"},
        {"kind": "outlook", "reason": "skipped variant"},
    ]
    base = card_hash(spec(), card)
    for group, name in [
        ("background_binding", "owned_objects"),
        ("id_policy", "allowed_base_entity_ids"),
        ("id_policy", "allowed_outlook_pairs"),
        ("asset_requirements", "required_refs"),
        ("asset_requirements", "forbidden_refs"),
        ("continuity_elements_used", "fixed_elements"),
    ]:
        permuted = copy.deepcopy(card)
        assert len(permuted[group][name]) >= 2
        permuted[group][name].reverse()
        assert card_hash(spec(), permuted) == base, name


def test_ordered_lists_are_not_sorted() -> None:
    refs = [
        {"scene_index": 12, "shot_index": 3, "ref_usage": "zoom_in_detail"},
        {"scene_index": 12, "shot_index": 1, "ref_usage": "continuation"},
    ]
    a = build_card(spec(), make_inputs(previous_shot_refs=refs)).hash
    b = build_card(spec(), make_inputs(previous_shot_refs=refs[::-1])).hash
    assert a != b


# -- property tests ------------------------------------------------------------------------------

_ids = st.lists(
    st.sampled_from(["C01", "C02", "C03", "L01", "P03", "카메라"]),
    unique=True,
    min_size=0,
    max_size=5,
)
_pairs = st.lists(
    st.tuples(st.sampled_from(["C01", "C02", "C03"]), st.sampled_from(["O01", "O02", "O03"])),
    unique=True,
    max_size=5,
)
_owned = st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=5)


@settings(max_examples=40, deadline=None)
@given(
    ids=_ids,
    pairs=_pairs,
    owned=_owned,
    elements=st.lists(st.integers(0, 50), unique=True, max_size=4),
    data=st.data(),
)
def test_permuting_declared_unordered_inputs_never_changes_the_hash(
    ids: list[str],
    pairs: list[tuple[str, str]],
    owned: list[str],
    elements: list[int],
    data: st.DataObject,
) -> None:
    def inputs(order: list[int] | None = None) -> dict[str, Any]:
        p = [{"character_id": c, "outlook_id": o} for c, o in pairs]
        f = [fixed_element(f"e{n}") for n in elements]
        return make_inputs(
            visible_entities=list(ids), outlook_pairs=p, bg_owned=list(owned), fixed_elements=f
        )

    base = build_card(spec(), inputs())
    shuffled = inputs()
    for name in ("visible_entities", "outlook_pairs", "bg_owned", "fixed_elements"):
        shuffled[name] = data.draw(st.permutations(shuffled[name]), label=name)
    again = build_card(spec(), shuffled)
    assert again.hash == base.hash
    assert again.card == base.card


def _mutations(value: Any, ftype: str, allowed: tuple[Any, ...], sort_key: str | None) -> Any:
    if ftype == "enum":
        return next(a for a in allowed if a != value)
    if value is None or ftype == "string":
        return (value or "") + "·"
    if ftype == "bool":
        return not value
    if ftype == "int":
        return value + 1
    if ftype == "object":
        return {**value, "extra": 1}
    extra: Any = {k: "zz" for k in sort_key.split("|")} if sort_key else "zz-extra"
    return [*value, extra]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), close=st.booleans(), bg_on=st.booleans())
def test_changing_any_semantic_field_changes_the_hash(
    data: st.DataObject, close: bool, bg_on: bool
) -> None:
    s = spec()
    card = build(close=close, bg_on=bg_on)
    fd = data.draw(st.sampled_from(list(s.fields())), label="field")
    changed = copy.deepcopy(card)
    changed[fd.group][fd.name] = _mutations(
        card[fd.group][fd.name], fd.type, fd.allowed, fd.sort_key
    )
    assert card_hash(s, changed) != card_hash(s, card)
