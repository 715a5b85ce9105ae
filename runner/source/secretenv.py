"""The environment of the commands steps run: a short base set from runner's, and what the
step names.

runner's own environment holds secrets (provider keys, ``[cache] sign_key_env``'s team key that
signs remote records, a CI's tokens) and whatever else the user's shell exported. A command that
inherited it, less the names a list recognised as secret, got every secret the list missed: the
cache signing key reached every shell step, which printed it in base64 into the journal and the
team's remote. So the environment is built up, not filtered down. A command gets

- the base set ``BASE_NAMES`` (what programs need to find themselves, their user, their home,
  their language and their terminal: PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, the
  LC_* categories, TZ, TERM, TMPDIR), when runner has them;
- the variables its own step names in ``pass_env``, and only that step's (a variable passed
  to one step is given to no other);
- its ``env:``, which the pipeline wrote.

Nothing else of runner's environment. Even a base name is withheld when it looks like a
credential (``secretnames.SECRET_NAME``: *_KEY, *_TOKEN, *SECRET*, *PASSWORD*, *_PAT, ...) or
a configured provider reads a secret from it, unless ``pass_env`` names it. A variable named in
``pass_env`` is learnt as a secret (secretmask.learn): masked wherever it shows, and wiped from
/proc/<runner>/environ.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from .secretnames import SECRET_NAME

# What every command is given from runner's environment (docs/steps.md, "What a command is
# given"). A fixed list, so what a step sees does not depend on what else the user exported.
BASE_NAMES: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "TERM", "LANG", "LANGUAGE",
    "LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME",
    "LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME", "LC_PAPER", "LC_TELEPHONE",
)  # fmt: skip


def command_environment(
    extra: Mapping[str, str] | None = None,
    *,
    pass_env: Iterable[str] = (),
    named: Iterable[str] = (),
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one command: from ``base`` (runner's environment), the base set less
    credential-looking names and ``named`` (the variables providers read secrets from), and the
    names in ``pass_env``; then ``extra`` (the step's own ``env:``) on top. A new dict."""
    keep, withheld = frozenset(pass_env), frozenset(named)
    if keep or withheld:
        from .secretmask import learn  # masked wherever they show, wiped from /proc

        learn(keep | withheld)
    source = os.environ if base is None else base
    env: dict[str, str] = {}
    for name in _PLAIN_BASE_NAMES:
        value = source.get(name)
        if value is not None and name not in withheld:
            env[name] = value
    for name in keep:
        value = source.get(name)
        if value is not None:
            env[name] = value
    env.update(extra or {})
    return env


def is_credential_name(name: str) -> bool:
    """Whether a variable's name looks like it holds a credential (secretnames.SECRET_NAME)."""
    return SECRET_NAME.search(name) is not None


# The base names that do not look like credentials: a fixed list, checked once, not per command.
_PLAIN_BASE_NAMES = tuple(name for name in BASE_NAMES if not is_credential_name(name))
