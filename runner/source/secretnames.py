"""Which variables hold secrets: the names runner.toml's ``*_env`` settings give, and every
name that looks like a credential; and wiping learnt secrets from runner's initial environment
block (what ``/proc/<pid>/environ`` shows). Used by secretenv (what a command is given) and
secretmask (what is masked); imports neither.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .tomlfile import find_runner_toml

# Names that look like they hold a credential: *_KEY, *_TOKEN, *SECRET*, *PASSWORD*, *_PAT,
# API/access/private keys, credentials. Their values are masked (secretmask), and commands are
# not given them unless a step's pass_env names them (secretenv).
SECRET_NAME = re.compile(
    r"(?i)(api_?key|secret|passw(or)?d|_token$|^token$|access_?key|private_?key|credential"
    r"|_key$|^key$|_pat$|^pat$)"
)


def toml_env_names(root: Path) -> frozenset[str]:
    """Every variable a ``*_env`` setting of the nearest runner.toml names, in any table
    ([providers.*] api_key_env, [cache] sign_key_env, ...)."""
    found = _nearest_toml(root)
    return frozenset() if found is None else _all_names_in(*found)


@lru_cache(maxsize=16)
def _all_names_in(path: str, _mtime_ns: int, _size: int) -> frozenset[str]:
    data = _load(path)
    if data is None:
        return frozenset()
    names: set[str] = set()

    def walk(table: Mapping[str, Any], depth: int) -> None:
        for key, value in table.items():
            if key.endswith("_env") and isinstance(value, str):
                names.add(value)
            elif isinstance(value, dict) and depth < 4:
                walk(value, depth + 1)

    walk(data, 0)
    return frozenset(names)


# Set in a warm server's child (runner/warm/child.py): its environment was given to it after it
# started, so the C library's variables are the given ones, not the initial block's.
_adopted = False


def environ_adopted() -> None:
    """This process's environment was set after start-up (putenv) from another process's."""
    global _adopted
    _adopted = True


def wipe_initial_environ(names: Iterable[str]) -> int:
    """Overwrite the values of ``names`` in the process's initial environment block, the
    memory ``/proc/<pid>/environ`` reads (Linux). Returns how many were wiped.

    A step's process can read ``/proc/$PPID/environ``: runner's environment as it was
    started, whatever ``os.environ`` holds since (deleting from it, or unsetenv, changes
    neither the block nor the file). Overwriting the block in place does (setproctitle
    overwrites the same region). ``os.environ`` is Python's own copy, made at start-up and
    unchanged: runner still reads the secrets there. C code that reads the variable later
    (getenv) and children started without an explicit environment see it empty."""
    names = list(names)
    if _adopted:  # as a wiped block entry reads: set, and empty
        for name in names:
            if name in os.environ:
                os.putenv(name, "")
    wanted = {n.encode("utf-8", "surrogateescape") + b"=" for n in names}
    region = _environ_region() if wanted else None
    if region is None:
        return 0
    import ctypes

    start, end = region
    block = ctypes.string_at(start, end - start)
    wiped, pos = 0, 0
    while pos < len(block):
        stop = block.find(b"\0", pos)
        stop = len(block) if stop == -1 else stop
        entry = block[pos:stop]
        eq = entry.find(b"=")
        if eq > 0 and entry[: eq + 1] in wanted and stop > pos + eq + 1:
            ctypes.memset(start + pos + eq + 1, 0, stop - pos - eq - 1)
            wiped += 1
        pos = stop + 1
    return wiped


def _environ_region() -> tuple[int, int] | None:
    """(env_start, env_end) of this process, from /proc/self/stat (fields 50 and 51)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])
    except (OSError, ValueError, IndexError):
        return None  # not Linux, or /proc not mounted: nothing shows the block
    return (start, end) if 0 < start < end else None


def provider_env_names(root: Path) -> frozenset[str]:
    """The variables named by ``*_env`` settings of the providers in the nearest runner.toml
    (api_key_env, password_env, ...). Read directly, so a shell-only pipeline imports no
    provider code; a file that cannot be read names none (the apply reports it elsewhere)."""
    found = _nearest_toml(root)
    return frozenset() if found is None else _names_in(*found)


@lru_cache(maxsize=16)
def _names_in(path: str, _mtime_ns: int, _size: int) -> frozenset[str]:
    data = _load(path)
    if data is None:
        return frozenset()
    sections = data.get("providers")
    if not isinstance(sections, dict):
        return frozenset()
    return frozenset(
        value
        for section in sections.values()
        if isinstance(section, dict)
        for key, value in section.items()
        if key.endswith("_env") and isinstance(value, str)
    )


def _nearest_toml(root: Path) -> tuple[str, int, int] | None:
    """The nearest runner.toml as (path, mtime_ns, size): the key its parsed names are cached
    under (an edited file is read again), or None when there is none."""
    try:
        candidate = find_runner_toml(root)
    except UsageError:  # not a regular file: the command that reads it says so
        return None
    if candidate is None:
        return None
    try:
        st = candidate.stat()
    except OSError:
        return None
    return str(candidate), st.st_mtime_ns, st.st_size


def _load(path: str) -> dict[str, Any] | None:
    """runner.toml's tables; None when it cannot be read (the apply reports that elsewhere)."""
    from .tomlfile import loads_toml

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    text = data.decode()  # as strictly as tomllib.load did
    try:
        return loads_toml(text)
    except ValueError:  # tomllib's TOMLDecodeError
        return None
