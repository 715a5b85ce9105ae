"""One contract, every object store: the local directory, file://, memory:// and s3:// (moto).

Each implementation must give the same answers: digests are sha256, writes are atomic (a
reader never sees part of an object, a failed write leaves nothing), reads verify the digest
(a damaged object raises, it is never served), listing shows objects and nothing else.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.errors import StoreError
from runner.state.backends import FsspecObjectStore, ObjectBackend, open_objects
from runner.state.objects import ObjectStore
from tests.state.remote.s3server import S3Server


@dataclass
class Case:
    store: ObjectBackend
    corrupt: Callable[[str, bytes], None]  # replace an object's bytes behind the store's back
    listing: Callable[[], list[str]]  # every name under the store, temporaries included


def _local(tmp_path: Path) -> Case:
    root = tmp_path / "objects"
    store = ObjectStore(root)

    def corrupt(digest: str, data: bytes) -> None:
        p = store.path(digest)
        os.chmod(p, 0o644)
        p.write_bytes(data)

    return Case(store, corrupt, lambda: [str(p) for p in root.rglob("*") if p.is_file()])


def _fsspec(url: str) -> Case:
    store = FsspecObjectStore(url)

    def corrupt(digest: str, data: bytes) -> None:
        store.fs.pipe_file(store._file(digest), data)

    def listing() -> list[str]:
        try:
            return [str(p) for p in store.fs.find(store.base)]
        except FileNotFoundError:
            return []

    return Case(store, corrupt, listing)


@pytest.fixture(params=["local", "file", "memory", "s3"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    kind = request.param
    if kind == "local":
        yield _local(tmp_path)
    elif kind == "file":
        yield _fsspec(f"file://{tmp_path}/objects")
    elif kind == "memory":
        yield _fsspec(f"memory://contract-{uuid.uuid4().hex}/objects")
    else:
        s3: S3Server = request.getfixturevalue("s3_env")
        yield _fsspec(f"s3://{s3.new_bucket()}/team/objects")


def test_put_has_size_read_list_delete(case: Case) -> None:
    store = case.store
    data = b"a generated image, say"
    digest = store.put_bytes(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert store.has(digest)
    assert store.size(digest) == len(data)
    assert store.read_bytes(digest) == data
    assert store.verify(digest)
    assert store.iter_digests() == [digest]
    assert store.put_bytes(data) == digest  # idempotent
    assert store.iter_digests() == [digest]
    store.delete(digest)
    assert not store.has(digest)
    assert store.iter_digests() == []
    with pytest.raises(StoreError, match="missing"):
        store.read_bytes(digest)
    with pytest.raises(StoreError, match="missing"):
        store.size(digest)
    store.delete(digest)  # deleting what is gone is not an error


def test_put_file_streams_a_large_file(case: Case, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    data = os.urandom(3 * (1 << 20) + 17)
    src.write_bytes(data)
    digest = case.store.put_file(src)
    assert digest == hashlib.sha256(data).hexdigest()
    assert case.store.read_bytes(digest) == data


def test_a_damaged_object_is_never_served(case: Case) -> None:
    digest = case.store.put_bytes(b"the real bytes")
    case.corrupt(digest, b"the real byte")  # truncated behind the store's back
    assert not case.store.verify(digest)
    with pytest.raises(StoreError, match="damaged"):
        case.store.read_bytes(digest)


def test_bad_digests_are_refused(case: Case) -> None:
    for bad in ["", "../etc/passwd", "ab" * 31 + "z/", "A" * 64]:
        with pytest.raises(StoreError, match="not an object digest"):
            case.store.has(bad)


def test_no_temporary_is_left_and_readers_see_whole_objects(case: Case) -> None:
    store = case.store
    blobs = [os.urandom(512 * 1024) + bytes([i]) for i in range(6)]
    digests = [hashlib.sha256(b).hexdigest() for b in blobs]
    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for d, b in zip(digests, blobs, strict=True):
                try:
                    got = store.read_bytes(d)
                except StoreError as exc:
                    if "missing" not in exc.message:
                        problems.append(exc.message)
                    continue
                if got != b:
                    problems.append(f"partial read of {d[:8]}")
                seen.append(d)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for b in blobs:
            store.put_bytes(b)
    finally:
        stop.set()
        t.join()
    assert problems == []
    assert sorted(store.iter_digests()) == sorted(digests)
    names = case.listing()
    assert len(names) == len(digests), names  # objects only: no temporary left behind
    assert all(store.read_bytes(d) == b for d, b in zip(digests, blobs, strict=True))


def test_open_objects_takes_a_path_or_a_url(tmp_path: Path) -> None:
    assert isinstance(open_objects(tmp_path / "o"), ObjectStore)
    assert isinstance(open_objects(f"memory://x-{uuid.uuid4().hex}"), FsspecObjectStore)
    assert isinstance(open_objects(tmp_path / "o"), ObjectBackend)
    assert isinstance(open_objects(f"memory://y-{uuid.uuid4().hex}"), ObjectBackend)
