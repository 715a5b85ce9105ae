"""Every secret value runner knows, masked (``***``) wherever data leaves its hands.

As CI systems mask registered secrets, runner masks the values of

- every variable a ``*_env`` setting of runner.toml names (api_key_env, password_env,
  sign_key_env, in any table),
- every variable a step names in ``pass_env`` (learnt when a command is given it), and
- every variable whose name looks like a credential (secretnames.SECRET_NAME: the variables
  runner already withholds from commands).

A value is masked as base64 and URL encoding write it too (redact.encoded_forms).

Values shorter than ``MIN_SECRET_CHARS`` (8) are not masked: a 1-7 character value (``1``,
``true``, ``admin``) would mask ordinary words and numbers everywhere; real keys and tokens
are far longer. Nor are values naming an existing file or directory (a credentials file's
path, a HOME passed with pass_env): the file holds the secret, and masking its path would mask
every path under it. A whole value is masked, and a head of one cut at the end of a text or a
tail at its start (6 characters or more); unlike provider messages (source/redact.py), not
any 8 characters of it, which in a step's data can be ordinary text.

Masked where data enters storage or output, one place each: the journal (every row written,
state/masked.py), the events of a run (engine/run/recorder.py: the console, --events files,
live pages), runner's own stdout and stderr (surfaces/cli/app.py: every message and error
printed), the web server's responses (surfaces/web/app.py) and provider call logs. Objects are
the bytes steps made and are not rewritten; a result whose output holds a secret is not pushed
to a remote cache.

Once learnt, a secret is also wiped from runner's initial environment block (what
``/proc/<pid>/environ`` shows to a step reading ``/proc/$PPID/environ``): see
``secretnames.wipe_initial_environ``. Runner keeps reading it from ``os.environ``, its own copy.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from .redact import MASK, Redactor
from .secretnames import SECRET_NAME, toml_env_names, wipe_initial_environ

MIN_SECRET_CHARS = 8

_known: set[str] = set()  # the process's secrets: one run, one command, one server
_learnt: set[str] = set()  # variable names already looked at
_redactor = Redactor(headers=False, pieces=False)
_blocks: list[str] = []  # see _blocks_of

__all__ = ["MASK", "MIN_SECRET_CHARS", "active", "holds_secret", "learn", "mask", "mask_json"]


def learn(names: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
    """Know the values of the variables ``names`` (those set) as secrets, and wipe them from
    the process's initial environment block."""
    global _redactor
    env = os.environ if environ is None else environ
    fresh = [n for n in names if n not in _learnt]
    if not fresh:
        return
    _learnt.update(fresh)
    values = {env[n] for n in fresh if _is_secret_value(env.get(n) or "")}
    # As JSON writes them too (a quote, a backslash, a non-ASCII letter): rows hold JSON text.
    values |= {json.dumps(v, ensure_ascii=a)[1:-1] for v in values for a in (True, False)}
    wipe_initial_environ(fresh)
    if values - _known:
        _known.update(values)
        _redactor = Redactor(_known, headers=False, pieces=False)
        _blocks[:] = sorted({b for v in _redactor.secrets for b in _blocks_of(v)})


def shown_on_purpose(value: str) -> None:
    """Mask ``value`` no more: a secret a command exists to show its user (`runner serve`'s
    session token, in the URL it prints and the pages it serves)."""
    global _redactor
    if value not in _known:
        return
    _known.discard(value)
    _redactor = Redactor(_known, headers=False, pieces=False)
    _blocks[:] = sorted({b for v in _redactor.secrets for b in _blocks_of(v)})


def _blocks_of(secret: str) -> set[str]:
    """The first and last 4 characters of ``secret``: everything the redactor masks (the
    whole, a head cut at a text's end, a tail at its start, 6 characters or more) holds one,
    so a text holding neither needs no masking (most rows: a few ``in`` tests)."""
    return {secret[:4], secret[-4:]}


def may_hold(text: str) -> bool:
    """False when ``text`` surely holds no known secret nor a piece the redactor masks."""
    return any(b in text for b in _blocks)


def _is_secret_value(value: str) -> bool:
    """Long enough, and not the name of a file or directory (GOOGLE_APPLICATION_CREDENTIALS,
    a HOME in pass_env): what such a value names holds the secret, and masking the name would
    mask every path under it, in the journal's own records too."""
    if len(value) < MIN_SECRET_CHARS:
        return False
    if os.sep in value or value.startswith("~"):
        try:
            return not os.path.exists(os.path.expanduser(value))
        except (OSError, ValueError):
            return True
    return True


def learn_project(root: Path | None, environ: Mapping[str, str] | None = None) -> None:
    """Learn the variables the runner.toml above ``root`` names with ``*_env`` settings, and
    every set variable whose name looks like a credential."""
    env = os.environ if environ is None else environ
    names = {n for n in env if SECRET_NAME.search(n) is not None}
    if root is not None:
        names |= toml_env_names(root)
    learn(names, env)


def held_environ() -> dict[str, str]:
    """The learnt variables and their values (runner's own copy): what a process runner starts
    and trusts (a local Dask worker) is given explicitly, since the environment it would
    inherit has them wiped."""
    return {n: os.environ[n] for n in sorted(_learnt) if n in os.environ}


def active() -> bool:
    """Whether any secret is known (else masking costs nothing)."""
    return bool(_known)


def mask(text: str) -> str:
    return _redactor.redact(text) if _known and may_hold(text) else text


def mask_json(value: Any) -> Any:
    """A copy of a JSON-like value with every known secret masked in its strings."""
    if not _known:
        return value
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_json(v) for v in value]
    return value


def holds_secret(value: Any) -> bool:
    """Whether a known secret appears in any string of ``value``, plain or encoded (base64,
    URL: redact.encoded_forms)."""
    if not _known:
        return False
    if isinstance(value, str):
        return may_hold(value) and any(s in value for s in _redactor.secrets)
    if isinstance(value, dict):
        return any(holds_secret(k) or holds_secret(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_secret(v) for v in value)
    return False


def bytes_hold_secret(data: bytes) -> bool:
    """Whether a known secret appears in ``data`` (an object's bytes), plain or encoded, as
    UTF-8 writes it."""
    if not _known:
        return False
    return any(s.encode("utf-8", "surrogatepass") in data for s in _redactor.secrets)


class MaskedStream(io.TextIOBase):
    """A text stream (runner's stdout or stderr) that writes every known secret masked."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(mask(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.inner.errors

    @property
    def buffer(self) -> Any:  # bytes (an image, an archive) are the data asked for, as is
        return self.inner.buffer

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return self.inner.closed


def mask_streams() -> None:
    """Everything runner prints from now on is masked: its messages, errors, tables, JSON."""
    if not isinstance(sys.stdout, MaskedStream) and sys.stdout is not None:
        sys.stdout = MaskedStream(sys.stdout)
    if not isinstance(sys.stderr, MaskedStream) and sys.stderr is not None:
        sys.stderr = MaskedStream(sys.stderr)


def forget() -> None:
    """Know no secret (tests that run several projects in one process)."""
    global _redactor
    _known.clear()
    _learnt.clear()
    _blocks.clear()
    _redactor = Redactor(headers=False, pieces=False)
