"""File digests read through the raw descriptor: the same bytes as hashlib sees, whatever the
size around the read size, and the store's put_file keeps a file whole on either path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.state import filedigest
from runner.state.filedigest import read_small, sha256_file
from runner.state.objects import ObjectStore

SIZES = [0, 1, filedigest.CHUNK - 1, filedigest.CHUNK, filedigest.CHUNK + 1, 3 * filedigest.CHUNK]


@pytest.mark.parametrize("size", SIZES)
def test_digest_and_store_match_hashlib_at_every_size(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert sha256_file(path) == want
    store = ObjectStore(tmp_path / "objects")
    assert store.put_file(path) == want
    assert store.read_bytes(want) == data


@settings(max_examples=60)
@given(data=st.binary(max_size=4096), limit=st.integers(min_value=1, max_value=5000))
def test_read_small_is_whole_only_under_the_limit(tmp_path_factory: pytest.TempPathFactory,
                                                  data: bytes, limit: int) -> None:
    path = tmp_path_factory.mktemp("rs") / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        head, whole = read_small(fd, limit)
        rest = b"" if whole else b"".join(iter(lambda: os.read(fd, 4096), b""))
    finally:
        os.close(fd)
    assert whole == (len(data) < limit)
    assert head + rest == data
    assert whole or len(head) >= limit


def test_a_directory_or_missing_file_raises_as_open_does(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        sha256_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        sha256_file(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        ObjectStore(tmp_path / "objects").put_file(tmp_path)
