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
from collections.abc import Iterable, Mapping
from typing import Any

from .secretnames import SECRET_NAME


def command_environment(
    extra: Mapping[str, str] | None = None,
    *,
    pass_env: Iterable[str] = (),
    named: Iterable[str] = (),
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``base`` (runner's environment) without secret variables, except those in ``pass_env``,
    then ``extra`` (the step's own ``env:``, which it wrote itself) on top. A new dict."""
    keep, withheld = frozenset(pass_env), frozenset(named)
    if keep or withheld:
        from .secretmask import learn  # masked wherever they show, wiped from /proc

        learn(keep | withheld)
    source = _scrubbed_environ(keep, withheld) if base is None else _scrub(base, keep, withheld)
    env = dict(source)
    env.update(extra or {})
    return env



def _scrub(
    source: Mapping[str, str], keep: frozenset[str], named: frozenset[str]
) -> dict[str, str]:
    return {
        k: v
        for k, v in source.items()
        if k in keep or not (k in named or SECRET_NAME.search(k) is not None)
    }



_SCRUBBED: dict[tuple[frozenset[str], frozenset[str]], tuple[dict[Any, Any], dict[str, str]]] = {}



def _scrubbed_environ(keep: frozenset[str], named: frozenset[str]) -> dict[str, str]:
    """Read-only: callers copy it."""
    raw = getattr(os.environ, "_data", None)  # CPython's os.environ keeps it; others scrub anew
    if not isinstance(raw, dict):
        return _scrub(os.environ, keep, named)
    memo = _SCRUBBED.get((keep, named))
    if memo is not None and memo[0] == raw:
        return memo[1]
    snapshot = dict(raw)
    env = _scrub(os.environ, keep, named)
    if len(_SCRUBBED) >= 64:  # steps with many different pass_env lists: stay small
        _SCRUBBED.clear()
    _SCRUBBED[(keep, named)] = (snapshot, env)
    return env

