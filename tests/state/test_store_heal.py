"""Issue 16 point 6: a damaged object is never served, and the next apply re-creates it.

Every damage in tests/store_corpus/damaged_objects.yaml meets every consumer: a read, a restore
of a deleted output, the next write of the same bytes, the no-op fast path, a downstream step,
an export and the web page's image route. Real files, real SQLite, the CLI in-process.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from runner.errors import StoreError
from runner.state.objects import DAMAGED, ObjectStore
from tests.conftest import Project, ran
from tests.review.test_thumbnail import apply as thumb_apply
from tests.review.test_thumbnail import cli as thumb_cli
from tests.review.test_thumbnail import thumbs  # noqa: F401  # the fixture
from tests.store_damage import damage, damage_cases

CASES = damage_cases()
IDS = [c["id"] for c in CASES]
TEXT = b"hello object store"
DIGEST = hashlib.sha256(TEXT).hexdigest()

PIPE = """\
    runner: 1
    name: heal
    steps:
      make:
        uses: shell
        with: {run: "mkdir -p out && printf 'hello object store' > out/f.txt", outputs: [out/f.txt]}
"""


def _object(root: Path, digest: str) -> Path:
    return root / ".runner" / "objects" / digest[:2] / digest[2:]


def _whole(path: Path, digest: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_store_reads_refuse_and_writes_replace(tmp_path: Path, case: dict[str, Any]) -> None:
    store = ObjectStore(tmp_path / "objects")
    digest = store.put_bytes(TEXT)
    damage(store.path(digest), case)
    fresh = ObjectStore(tmp_path / "objects")  # another process: nothing trusted yet
    with pytest.raises(StoreError, match="damaged"):
        fresh.read_bytes(digest)
    assert not fresh.exists(digest)  # set aside ...
    assert (tmp_path / "objects" / DAMAGED / digest).exists()  # ... kept for a post-mortem
    damage_again = ObjectStore(tmp_path / "objects")
    damage_again.put_bytes(TEXT)
    damage(damage_again.path(digest), case)
    dest = tmp_path / "restored" / "f.txt"
    with pytest.raises(StoreError, match="damaged"):
        ObjectStore(tmp_path / "objects").restore(digest, dest)
    # no partial copy either (a symlink is refused before the destination is even made)
    assert not dest.exists() and (not dest.parent.exists() or list(dest.parent.iterdir()) == [])
    # the name is there but damaged: the next write of the same bytes replaces it
    writer = ObjectStore(tmp_path / "objects")
    writer.put_bytes(TEXT)
    damage(writer.path(digest), case)
    assert ObjectStore(tmp_path / "objects").put_bytes(TEXT) == digest
    assert _whole(store.path(digest), digest)
    assert ObjectStore(tmp_path / "objects").read_bytes(digest) == TEXT


def test_trusted_signature_skips_the_hash_only_while_the_file_is_unchanged(
    tmp_path: Path,
) -> None:
    store = ObjectStore(tmp_path / "objects")
    digest = store.put_bytes(TEXT)
    sig = store.trusted_signature(digest)
    assert sig is not None and sig[0] == len(TEXT)
    damage(store.path(digest), {"how": "flip", "keep_mtime": True})
    assert store.has(digest) is False  # same size and mtime, but ctime moved: hashed again


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_apply_does_not_restore_a_damaged_object_and_rewrites_it(
    project: Project, case: dict[str, Any]
) -> None:
    project.write("pipeline.yaml", PIPE)
    assert project.apply()["_exit"] == 0
    assert ran(project.apply()) == set()  # converged: the no-op fast path holds from here
    obj = _object(project.root, DIGEST)
    damage(obj, case)
    (project.root / "out" / "f.txt").unlink()
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    assert ran(doc) == {"make"}  # not restored from the damaged object: made again
    assert (project.root / "out" / "f.txt").read_bytes() == TEXT
    assert _whole(obj, DIGEST)
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_next_apply_rewrites_a_damaged_object_despite_the_fast_path(
    project: Project, case: dict[str, Any]
) -> None:
    project.write("pipeline.yaml", PIPE)
    assert project.apply()["_exit"] == 0
    assert ran(project.apply()) == set()
    obj = _object(project.root, DIGEST)
    damage(obj, case)
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is False
    doc = project.apply()  # the output file is fine; its stored copy is not
    assert doc["_exit"] == 0 and ran(doc) == {"make"}, doc
    assert _whole(obj, DIGEST)
    assert ran(project.apply()) == set()
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True


EXPENSIVE = [c for c in CASES if c["id"] in ("truncated-to-half", "flipped-mtime-kept")]


@pytest.mark.parametrize("case", EXPENSIVE, ids=[c["id"] for c in EXPENSIVE])
def test_export_and_web_page_refuse_a_damaged_final(
    thumbs: Project, case: dict[str, Any]  # noqa: F811
) -> None:
    from runner.engine.run.apply import State
    from runner.surfaces.web.service import image_object

    doc = thumb_apply(thumbs)
    run_id = doc["run"]["id"]
    final = doc["iterations"][0]["assets"]["final"]
    damage(_object(thumbs.root, final), case)
    res = thumb_cli(thumbs, "export", f"{run_id}-1", "--to", "out", "--json")
    assert res.exit_code == 1 and "damaged" in res.stderr, res.stderr
    assert not (thumbs.root / "out").exists() or list((thumbs.root / "out").iterdir()) == []
    other = doc["iterations"][1]["assets"]["final"]
    state = State.open(thumbs.root / ".runner")
    try:
        assert image_object(state, final) is None  # the web page never serves it
        assert image_object(state, other) is not None
    finally:
        state.close()


def test_a_downstream_step_never_reads_a_damaged_object(thumbs: Project) -> None:  # noqa: F811
    doc = thumb_apply(thumbs)
    raw = doc["iterations"][0]["assets"]["raw"]
    obj = _object(thumbs.root, raw)
    damage(obj, {"how": "truncate", "size": "half"})
    again = thumb_apply(thumbs, "-p", "overlay=false")  # finalize runs again on the raws
    first = next(it for it in again["iterations"] if it["ordinal"] == 1)
    assert first["status"] == "failed"  # a paid image is not re-bought without asking
    assert "missing or damaged" in (first["error"] or ""), first
    assert all(it["status"] == "completed" for it in again["iterations"][1:])
    assert not obj.exists() and (obj.parent.parent / DAMAGED / raw).exists()
