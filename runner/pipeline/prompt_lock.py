"""Published prompt versions are immutable: `prompts.lock` records each version's content hash.

A versioned prompt directory is ``prompts/<family>/<version>/`` where version is a number. Once
locked, changing a file in it is refused (apply and validate exit 2): a new version is a new
directory, so its steps get new keys and re-run, while the old version stays reproducible.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ..errors import InvalidPipeline, Location

LOCK_NAME = "prompts.lock"
_VERSION = re.compile(r"^\d+$")


def version_dirs(prompts: Path) -> list[Path]:
    if not prompts.is_dir():
        return []
    return sorted(p for p in prompts.glob("*/*") if p.is_dir() and _VERSION.match(p.name))


def digest_dir(directory: Path) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def write_lock(root: Path) -> tuple[Path, dict[str, dict[str, str]]]:
    """Record every versioned prompt directory under root/prompts.

    Refuses to re-lock a version whose content changed since it was locked.
    """
    lock_path = root / LOCK_NAME
    existing = read_lock(lock_path)
    problems = check_lock(root, existing)
    if problems:
        raise InvalidPipeline(
            problems[0],
            where=Location(str(lock_path)),
            hint="create a new version directory instead",
        )
    versions = {
        d.relative_to(root).as_posix(): digest_dir(d) for d in version_dirs(root / "prompts")
    }
    versions.update(existing)
    lock_path.write_text(
        json.dumps({"versions": versions}, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return lock_path, versions


def read_lock(lock_path: Path) -> dict[str, dict[str, str]]:
    if not lock_path.is_file():
        return {}
    try:
        data = json.loads(lock_path.read_text(encoding="utf-8"))
        versions = data["versions"]
        assert isinstance(versions, dict)
    except (json.JSONDecodeError, KeyError, AssertionError):
        raise InvalidPipeline(
            f"{lock_path} is not a prompts lock file", where=Location(str(lock_path), 1, 1)
        ) from None
    return versions


def check_lock(root: Path, versions: dict[str, dict[str, str]]) -> list[str]:
    problems = []
    for rel, files in sorted(versions.items()):
        current = digest_dir(root / rel) if (root / rel).is_dir() else {}
        if current == files:
            continue
        changed = sorted(f for f in set(files) | set(current) if files.get(f) != current.get(f))
        problems.append(
            f"published prompt version {rel} is locked and its content changed "
            f"({', '.join(changed)}); create a new version directory instead"
        )
    return problems


def enforce(root: Path) -> None:
    """Raise InvalidPipeline when a locked prompt version under ``root`` changed."""
    lock_path = root / LOCK_NAME
    if not lock_path.is_file():
        return
    problems = check_lock(root, read_lock(lock_path))
    if problems:
        raise InvalidPipeline(
            problems[0],
            where=Location(str(lock_path)),
            hint="restore the file, or copy the directory to a new version",
        )
