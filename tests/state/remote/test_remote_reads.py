"""The remote's recorded reads (reads/<base>.json, issue 44) are untrusted input like its
records: only names inside the project, filed under the base key they name, signed when the
team signs; anything else is a StoreError value, never used."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from runner.errors import StoreError
from runner.state.remote import RemoteCache

BASE = hashlib.sha256(b"base").hexdigest()
OTHER = hashlib.sha256(b"other").hexdigest()


def _cache(tmp_path: Path, key: bytes | None = None) -> RemoteCache:
    return RemoteCache((tmp_path / "remote").as_uri(), writable=True, sign_key=key)


def _entry(tmp_path: Path, base: str) -> Path:
    return tmp_path / "remote" / "reads" / base[:2] / f"{base}.json"


def test_recorded_reads_go_and_come_back(tmp_path: Path) -> None:
    cache = _cache(tmp_path, b"team")
    assert cache.reads([BASE]) == {}
    cache.push_reads({BASE: ("parts/warm.j2", "parts/cold.j2")})
    assert cache.reads([BASE, OTHER]) == {BASE: ("parts/warm.j2", "parts/cold.j2")}


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"format": 1, "base": BASE, "recorded": ["../../etc/passwd"]}, "outside the project"),
        ({"format": 1, "base": BASE, "recorded": ["/etc/passwd"]}, "outside the project"),
        ({"format": 1, "base": OTHER, "recorded": ["a.j2"]}, "another base key"),
        ({"format": 1, "base": BASE, "recorded": "a.j2"}, "no files"),
        ({"format": 2, "base": BASE, "recorded": ["a.j2"]}, "unknown format"),
    ],
)
def test_a_doubtful_entry_is_refused(tmp_path: Path, doc: dict[str, object], why: str) -> None:
    cache = _cache(tmp_path)
    cache.push_reads({BASE: ("a.j2",)})
    _entry(tmp_path, BASE).write_text(json.dumps(doc), encoding="utf-8")
    [found] = cache.reads([BASE]).values()
    assert isinstance(found, StoreError) and why in found.message, found


def test_an_unsigned_or_mis_signed_entry_is_refused_where_the_team_signs(tmp_path: Path) -> None:
    _cache(tmp_path).push_reads({BASE: ("a.j2",)})  # written by someone without the key
    [found] = _cache(tmp_path, b"team").reads([BASE]).values()
    assert isinstance(found, StoreError) and "not signed" in found.message
    _cache(tmp_path, b"another").push_reads({BASE: ("a.j2",)})
    [found] = _cache(tmp_path, b"team").reads([BASE]).values()
    assert isinstance(found, StoreError) and "not signed" in found.message
