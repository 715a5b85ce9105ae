"""The journal's connection: every value written is masked of the secrets runner knows.

The one place data enters the journal: whatever a row holds (a step's output, stdout and
stderr, an error, a report, an event, a call's reply, a run's params), a known secret in it
is written as ``***`` (runner/source/secretmask.py). Reads and other statements pass untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from ..source import secretmask

_WRITES = ("INSERT", "UPDATE", "REPLACE")


class MaskedConnection(sqlite3.Connection):
    """A sqlite3 connection (``sqlite3.connect(..., factory=MaskedConnection)``)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if parameters and secretmask.active() and _writes(sql):
            parameters = _masked(parameters)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        if secretmask.active() and _writes(sql):
            parameters = [_masked(p) for p in parameters]
        return super().executemany(sql, parameters)


def _writes(sql: str) -> bool:
    return sql.lstrip()[:7].upper().startswith(_WRITES)


def _masked(parameters: Any) -> Any:
    if isinstance(parameters, Mapping):
        texts = [v for v in parameters.values() if isinstance(v, str)]
    elif isinstance(parameters, (list, tuple)):
        texts = [v for v in parameters if isinstance(v, str)]
    else:
        return parameters
    # One look at the row's text first: most rows hold nothing to mask.
    if not secretmask.may_hold("\0".join(texts)):
        return parameters
    if isinstance(parameters, Mapping):
        return {k: _value(v) for k, v in parameters.items()}
    return tuple(_value(v) for v in parameters)


def _value(value: Any) -> Any:
    return secretmask.mask(value) if isinstance(value, str) else value
