"""The environment of the commands steps run: runner's own, without the secrets it holds.

Provider keys live in runner's environment (``api_key_env = "OPENAI_API_KEY"``), so a shell
step or an ``exec`` check that simply inherited it would hand every key to every command (and
to whatever the command prints or uploads). A command gets none of them unless the step names
them in ``pass_env``:

- every variable a configured provider names with a ``*_env`` setting (api_key_env,
  password_env, ...), and
- every variable whose name looks like a credential: ``*API_KEY*``, ``*SECRET*``,
  ``*PASSWORD*``/``*PASSWD*``, ``*_TOKEN``, ``*ACCESS_KEY*``, ``*PRIVATE_KEY*``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from .tomlfile import find_runner_toml

SECRET_NAME = re.compile(
    r"(?i)(api_?key|secret|passw(or)?d|_token$|^token$|access_?key|private_?key|credential)"
)


def command_environment(
    extra: Mapping[str, str] | None = None,
    *,
    pass_env: Iterable[str] = (),
    named: Iterable[str] = (),
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``base`` (runner's environment) without secret variables, except those in ``pass_env``,
    then ``extra`` (the step's own ``env:``, which it wrote itself) on top."""
    source = os.environ if base is None else base
    keep = set(pass_env)
    named = frozenset(named)
    env = {
        k: v
        for k, v in source.items()
        if k in keep or not (k in named or SECRET_NAME.search(k) is not None)
    }
    env.update(extra or {})
    return env


def provider_env_names(root: Path) -> frozenset[str]:
    """The variables named by ``*_env`` settings of the providers in the nearest runner.toml
    (api_key_env, password_env, ...). Read directly, so a shell-only pipeline imports no
    provider code; a file that cannot be read names none (the apply reports it elsewhere)."""
    candidate = find_runner_toml(root)
    if candidate is None:
        return frozenset()
    try:
        st = candidate.stat()
    except OSError:
        return frozenset()
    return _names_in(str(candidate), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _names_in(path: str, _mtime_ns: int, _size: int) -> frozenset[str]:
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
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
