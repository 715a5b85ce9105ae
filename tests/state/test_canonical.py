from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.state import records
from runner.state.canonical import (
    CanonicalError,
    canonical_json,
    compact_json,
    digest,
    prepare,
    sha256_hex,
)
from tests.conftest import REPO, SHARED

# The design's vectors, copied into the repo so the suite runs without ../shared; when the shared
# copy is present it must still be the same file.
VECTORS_FILE = REPO / "tests" / "data" / "canonical.json"
VECTORS = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))["cases"]


def test_vectors_match_the_shared_copy() -> None:
    shared = SHARED / "vectors" / "canonical.json"
    if not shared.is_file():
        pytest.skip("../shared is not beside this checkout")
    assert json.loads(shared.read_text(encoding="utf-8")) == json.loads(
        VECTORS_FILE.read_text(encoding="utf-8")
    )


@pytest.mark.parametrize("case", VECTORS, ids=[c["name"] for c in VECTORS])
def test_vectors_byte_for_byte(case: dict) -> None:
    text = canonical_json(case["value"])
    assert text == case["canonical"]
    assert sha256_hex(text.encode("utf-8")) == case["sha256"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), (1, 2), {1: "a"}, object(), b"x"])
def test_non_json_values_are_refused(bad: object) -> None:
    with pytest.raises(CanonicalError):
        canonical_json({"v": bad})


def test_bool_is_not_an_int() -> None:
    assert digest({"a": True}) != digest({"a": 1})


def test_exclude_and_unordered() -> None:
    a = {"x": [3, 1, 2], "meta": 1, "objs": [{"id": "b"}, {"id": "a"}]}
    b = {"x": [2, 3, 1], "meta": 2, "objs": [{"id": "a"}, {"id": "b"}]}
    opts = {"exclude": ["meta"], "unordered": {"x": None, "objs": "id"}}
    assert digest(prepare(a, **opts)) == digest(prepare(b, **opts))
    assert digest(prepare(a, exclude=["meta"])) != digest(prepare(b, exclude=["meta"]))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=6), st.randoms())
def test_key_order_never_changes_the_key(doc: dict, rnd) -> None:
    keys = list(doc)
    rnd.shuffle(keys)
    shuffled = {k: doc[k] for k in keys}
    assert digest(shuffled) == digest(doc)


@given(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=6), st.data())
def test_any_value_change_changes_the_key(doc: dict, data) -> None:
    key = data.draw(st.sampled_from(sorted(doc)))
    new = data.draw(json_values)
    if json.dumps(new, sort_keys=True) == json.dumps(doc[key], sort_keys=True) and type(
        new
    ) is type(doc[key]):
        return
    changed = dict(doc)
    changed[key] = new
    if canonical_json(changed) == canonical_json(doc):  # e.g. 0.0 vs -0.0 differ in text already
        return
    assert digest(changed) != digest(doc)


@given(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=6))
def test_prepared_short_hash_equals_short_hash(doc: dict) -> None:
    from runner.state.canonical import prepared_short_hash, short_hash

    prepared = prepare(doc)
    assert prepared_short_hash(prepared) == short_hash(prepared) == short_hash(doc)


@given(json_values)
def test_the_encoder_made_once_writes_what_json_dumps_writes(value: object) -> None:
    expected = json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    assert compact_json(value) == expected
    assert records.dumps(value) == expected


def test_a_record_that_holds_itself_is_refused_in_words() -> None:
    looped: dict[str, object] = {"a": 1}
    looped["self"] = looped
    with pytest.raises(CanonicalError, match="holds itself"):
        records.dumps(looped)
    assert records.dumps({"after": [1.5, "é"]}) == '{"after":[1.5,"é"]}'  # nothing left behind
    with pytest.raises(TypeError, match="bytes is not JSON serializable"):
        records.dumps({"b": b"x"})
