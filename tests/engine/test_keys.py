"""The cache key is the sha256 of the canonical parts document, built in one place."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runner.engine.run.keys import KeyParts, changed_parts
from runner.state.canonical import digest

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=12,
)


@given(values, values, st.booleans())
def test_key_equals_the_digest_of_the_document(args: object, item: object, has_item: bool) -> None:
    parts = KeyParts("shell", "1", args, {"a.txt": "f" * 64}, {"p": 1}, "v2", item, has_item)
    assert parts.key() == digest(parts.as_document())
    summary = parts.summary()
    assert summary["args"] == digest(args) and ("item" in summary) == has_item
    assert parts.key() == digest(parts.as_document())  # now joined from the summary's parts


def test_changed_parts_names_what_changed() -> None:
    a = KeyParts("shell", "1", {"run": "x"}, {"in.txt": "1" * 64}, {}, None).summary()
    b = KeyParts("shell", "1", {"run": "x"}, {"in.txt": "2" * 64}, {}, None).summary()
    (only,) = changed_parts(a, b)
    old, new = a["files"]["in.txt"][:12], b["files"]["in.txt"][:12]
    assert only == f"input in.txt changed ({old} -> {new})"
    assert changed_parts(None, b) == ["never ran"]
