"""Damage an object file the ways tests/store_corpus/damaged_objects.yaml lists."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

CORPUS = Path(__file__).parent / "store_corpus" / "damaged_objects.yaml"


def damage_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
    return cases


def damage(path: Path, case: dict[str, Any]) -> None:
    """Damage the object at ``path`` in place (it is read-only, as the store leaves it)."""
    st = path.stat()
    data = path.read_bytes()
    os.chmod(path, 0o644)
    how = case["how"]
    if how == "truncate":
        size = len(data) // 2 if case["size"] == "half" else int(case["size"])
        with open(path, "r+b") as f:
            f.truncate(size)
    elif how == "flip":
        with open(path, "r+b") as f:
            f.seek(len(data) // 2)
            f.write(bytes([data[len(data) // 2] ^ 0x01]))
    elif how == "append":
        with open(path, "ab") as f:
            f.write(b"\0garbage")
    elif how == "replace":
        path.write_bytes(b"x" * len(data))
    elif how == "symlink":
        other = path.parent / "elsewhere.bin"
        other.write_bytes(data[::-1] or b"?")
        path.unlink()
        path.symlink_to(other)
    else:
        raise ValueError(how)
    if case.get("keep_mtime"):
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    if not path.is_symlink():
        os.chmod(path, 0o444)
