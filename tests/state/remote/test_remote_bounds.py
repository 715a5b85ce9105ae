"""The team cache has bounds (issue 40, section 3): what a remote holds at a record's or an
object's name is read only when it is a regular file of bounded size, before anything parses it.

A record that was a FIFO hung every clone's apply with no message; one that was a symlink to
/dev/zero grew the apply to 10 GB (the read came before the signature check); an S3 remote can
hold a multi-GB record. Each is now refused in one line, its step runs here, the remote's other
records are still used, and `cache pull` says "refused", not "not in the remote".
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.errors import StoreError
from runner.state.remote import RemoteCache
from runner.state.remoteread import MAX_RECORD_BYTES
from tests.conftest import runner_bin
from tests.state.remote.test_remote_tamper import KEY_VAR, Remote, _clone, _honest, _statuses
from tests.state.remote.test_remote_tamper import remote as remote  # the fixture, file and S3

# Seconds an apply may take here: a read that waits on a FIFO never ends, one of /dev/zero
# takes far longer than this to fill memory.
APPLY_SECONDS = 60


def _apply(root: Path, remote: Remote, *args: str) -> dict[str, Any]:
    full = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE", KEY_VAR)}
    full.update(remote.env, NO_COLOR="1")
    res = subprocess.run(
        [*runner_bin(), *(args or ("apply", "p.yaml", "-q")), "--json"],
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        timeout=APPLY_SECONDS,
    )
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    doc["_stderr"] = res.stderr
    return doc


def _file_base(remote: Remote) -> Path:
    assert remote.url.startswith("file://")
    return Path(remote.url.removeprefix("file://"))


def _ask_record(remote: Remote) -> str:
    return remote.record_of("llm@1", lambda r: "hello" in r["output"]["text"].lower())


def _refused_once(doc: dict[str, Any], says: str) -> None:
    """One line says the refusal and why; no other line of stderr speaks of the remote failing."""
    lines = [line for line in doc["_stderr"].splitlines() if "refused" in line]
    assert len(lines) == 1 and says in lines[0], doc["_stderr"]
    assert "unavailable" not in doc["_stderr"], doc["_stderr"]


@pytest.mark.parametrize("remote", ["file"], indirect=True)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_record_that_is_not_a_regular_file_is_refused_and_the_rest_is_used(
    tmp_path: Path, remote: Remote, kind: str
) -> None:
    _honest(tmp_path, remote)
    record = _file_base(remote) / _ask_record(remote)
    record.unlink()
    if kind == "fifo":
        os.mkfifo(record)
    elif kind == "dev-zero":
        record.symlink_to("/dev/zero")
    else:
        record.mkdir()
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    statuses = _statuses(doc)
    assert statuses["ask"] == "ran", statuses
    # One bad record never disables the remote: every other step is answered by it.
    assert {s for i, s in statuses.items() if i != "ask"} == {"cached"}, statuses
    assert doc["remote"]["refused"] == 1 and not doc["remote"]["unavailable"], doc["remote"]
    says = {"fifo": "a FIFO", "dev-zero": "symbolic link", "directory": "a directory"}[kind]
    _refused_once(doc, says)


@pytest.mark.parametrize("remote", ["file"], indirect=True)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_object_that_is_not_a_regular_file_is_refused_and_its_step_runs(
    tmp_path: Path, remote: Remote, kind: str
) -> None:
    _honest(tmp_path, remote)
    make = remote.record_of("shell@1", lambda r: "out.txt" in r["files"])
    digest = remote.records()[make]["files"]["out.txt"]
    obj = _file_base(remote) / "objects" / digest[:2] / digest[2:]
    obj.unlink()
    if kind == "fifo":
        os.mkfifo(obj)
    else:
        obj.symlink_to("/dev/zero")
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    statuses = _statuses(doc)
    assert statuses["make"] == "ran" and (b / "out.txt").read_text() == "made"
    assert statuses["ask"] == "cached" and not doc["remote"]["unavailable"], doc
    assert f"object {digest[:12]} refused" in doc["_stderr"], doc["_stderr"]


def test_a_record_over_the_cap_is_refused_unread(tmp_path: Path, remote: Remote) -> None:
    _honest(tmp_path, remote)
    ask = _ask_record(remote)
    remote.put(ask, b"{" + b" " * MAX_RECORD_BYTES + b"}")
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    assert _statuses(doc)["ask"] == "ran" and _statuses(doc)["other"] == "cached", doc
    assert doc["remote"]["refused"] == 1
    _refused_once(doc, f"more than the {MAX_RECORD_BYTES:,} allowed")


def test_cache_pull_says_refused_not_absent(tmp_path: Path, remote: Remote) -> None:
    _honest(tmp_path, remote)
    remote.put(_ask_record(remote), b"{" + b" " * MAX_RECORD_BYTES + b"}")
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote, "cache", "pull", "p.yaml")
    reasons = {s["id"]: s.get("reason") or "" for s in doc["steps"]}
    assert reasons["ask"].startswith("refused by the remote cache:"), reasons
    assert "not in the remote" not in reasons["ask"]
    assert _statuses(doc)["other"] == "cached"
    plain = subprocess.run(
        [*runner_bin(), "cache", "pull", "p.yaml"],
        cwd=b,
        env={**{k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}, **remote.env},
        capture_output=True,
        text=True,
        timeout=APPLY_SECONDS,
    )
    # Pulled before, answered locally now; the refused one is still said as refused.
    assert "1 refused by the remote" in plain.stdout, plain.stdout + plain.stderr


def test_an_s3_record_announcing_more_than_the_cap_is_refused_before_its_body_is_read(
    s3_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ContentLength is checked before the body: a small cap stands for a multi-GB record."""
    bucket = s3_env.new_bucket()
    key = "ab" * 32
    s3_env.put(bucket, f"team/records/{key[:2]}/{key}.json", b"{" + b" " * 4096 + b"}")
    cache = RemoteCache(f"s3://{bucket}/team")
    monkeypatch.setattr("runner.state.remote.MAX_RECORD_BYTES", 1024)
    found = cache.records([key, "cd" * 32])
    assert list(found) == [key]  # the other is absent, not refused
    refused = found[key]
    assert isinstance(refused, StoreError)
    assert "refused: it holds 4,098 bytes, more than the 1,024 allowed" in refused.message


def test_any_other_filesystem_is_read_no_further_than_the_cap(tmp_path: Path) -> None:
    """memory:// (and gs://) are read through their size, then a ranged read to the cap."""
    import fsspec

    from runner.state.remoteread import Refused, read_bounded

    fs = fsspec.filesystem("memory")
    base = f"/bounds-{tmp_path.name}"
    fs.pipe_file(f"{base}/small", b"x" * 10)
    fs.pipe_file(f"{base}/large", b"y" * 100)
    caps = {f"{base}/small": 10, f"{base}/large": 99, f"{base}/absent": 10}
    got = read_bounded(fs, caps, url="memory://")
    assert got[f"{base}/small"] == b"x" * 10 and f"{base}/absent" not in got
    refused = got[f"{base}/large"]
    assert isinstance(refused, Refused) and "100 bytes, more than the 99 allowed" in refused.message
