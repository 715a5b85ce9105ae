"""The object store's durability modes: grouped fsyncs (or one syncfs) during an apply, and
durable puts."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import StoreError
from runner.state import objects as objects_mod
from runner.state.objects import ObjectStore


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path fsynced (files and directories), in order; the real fsync still runs."""
    seen: list[Path] = []
    real = objects_mod._fsync_path

    def recording(path: Path) -> None:
        seen.append(Path(path))
        real(path)

    monkeypatch.setattr(objects_mod, "_fsync_path", recording)
    return seen


def test_grouped_puts_wait_for_sync(tmp_path: Path, synced: list[Path]) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digest = store.put_bytes(b"grouped")
    assert store.path(digest) not in synced  # written and renamed, not yet durable
    assert store.read_bytes(digest) == b"grouped"
    store.sync()
    assert store.path(digest) in synced and store.path(digest).parent in synced


def test_durable_put_is_fsynced_before_it_returns_even_when_grouped(
    tmp_path: Path, synced: list[Path]
) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digest = store.put_bytes(b"recorded at once", durable=True)
    assert store.path(digest).parent in synced  # the rename is durable too
    synced.clear()
    store.sync()
    assert synced == []  # nothing of it was left for the group


def test_durable_put_of_a_pending_object_settles_it(tmp_path: Path, synced: list[Path]) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digest = store.put_bytes(b"same bytes twice")
    assert synced == []
    assert store.put_bytes(b"same bytes twice", durable=True) == digest
    assert synced == [store.path(digest), store.path(digest).parent]
    synced.clear()
    store.sync()
    assert synced == []


@pytest.fixture
def syncfs_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every store root a group syncfs was asked for; the real one still runs (when the kernel
    has it: otherwise the group falls back to fsyncs)."""
    seen: list[str] = []
    real = objects_mod._syncfs

    def recording(root: str) -> bool:
        seen.append(root)
        return real(root)

    monkeypatch.setattr(objects_mod, "_syncfs", recording)
    return seen


def test_a_group_is_made_durable_by_one_syncfs(
    tmp_path: Path, synced: list[Path], syncfs_calls: list[str]
) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digests = [store.put_bytes(f"object {i}".encode()) for i in range(objects_mod.SYNCFS_FROM)]
    store.sync()
    assert syncfs_calls == [str(tmp_path / "objects")]
    if objects_mod._syncfs_call() is not None:
        assert synced == []  # no fsync of its own for any of them
    else:  # no syncfs here: each file, then each directory
        assert set(synced) == {store.path(d) for d in digests} | {
            store.path(d).parent for d in digests
        }
    store.sync()
    assert len(syncfs_calls) == 1  # nothing pending: nothing to do


def test_a_lone_object_keeps_its_own_fsyncs(
    tmp_path: Path, synced: list[Path], syncfs_calls: list[str]
) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digest = store.put_bytes(b"alone")
    store.sync()
    assert syncfs_calls == [] and synced == [store.path(digest), store.path(digest).parent]


def test_where_there_is_no_syncfs_a_group_is_fsynced_file_by_file(
    tmp_path: Path, synced: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(objects_mod, "_syncfs_call", lambda: None)
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    digests = [store.put_bytes(f"object {i}".encode()) for i in range(objects_mod.SYNCFS_FROM)]
    store.sync()
    files = {store.path(d) for d in digests}
    assert set(synced[: len(files)]) == files  # the files first, then their directories
    assert set(synced[len(files) :]) == {p.parent for p in files}


def test_a_failed_syncfs_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writeback the kernel reports failed: the journal must not commit (the error reaches
    the commit that called sync)."""
    monkeypatch.setattr(objects_mod, "_syncfs_call", lambda: lambda _fd: -1)
    store = ObjectStore(tmp_path / "objects")
    store.defer_sync()
    for i in range(objects_mod.SYNCFS_FROM):
        store.put_bytes(f"object {i}".encode())
    with pytest.raises(StoreError, match="cannot make objects durable"):
        store.sync()


def test_size_and_has(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    digest = store.put_file(_write(tmp_path / "f.txt", b"12345"))
    assert store.has(digest) and store.size(digest) == 5
    store.delete(digest)
    assert not store.has(digest)
    with pytest.raises(StoreError, match="missing"):
        store.size(digest)
    with pytest.raises(StoreError, match="not an object digest"):
        store.size("../../etc/passwd")


def test_large_file_is_streamed_and_named_by_its_hash(tmp_path: Path) -> None:
    import hashlib

    data = bytes(range(256)) * 8192  # 2 MiB: past the one-read path
    store = ObjectStore(tmp_path / "objects")
    digest = store.put_file(_write(tmp_path / "big.bin", data))
    assert digest == hashlib.sha256(data).hexdigest()
    assert store.verify(digest) and store.size(digest) == len(data)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
