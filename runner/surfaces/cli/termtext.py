"""Printing for the CLI: every command prints through ``echo`` (a line: data in it is inert,
a newline in it shown as ``\\n``) or ``echo_block`` (a document runner laid out: its lines stay,
control characters its data carried become visible). ``--json`` goes through ``base.emit_json``
(``safe_json``). tests/security/test_terminal_escapes.py checks that no command prints any
other way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ...source.termtext import safe, safe_block, safe_json

# click is imported by the functions that print through it: the quick apply (quickapply.py)
# uses json_line and safe from here and prints without click.

__all__ = [
    "echo",
    "echo_block",
    "echo_json",
    "echo_rendered",
    "json_line",
    "safe",
    "safe_block",
    "safe_json",
]


def isatty_stderr() -> bool:
    """Whether progress may be drawn live: stderr is a terminal that is not a dumb one."""
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def echo(line: object = "", *, err: bool = False) -> None:
    """One line runner composed with data in it, printed inert."""
    import click

    click.echo(safe(line), err=err)


def echo_block(text: str, *, err: bool = False) -> None:
    """Lines runner laid out (a table, a summary, a rendered template), printed inert; a final
    newline is added only when missing."""
    import click

    click.echo(safe_block(text), err=err, nl=not text.endswith("\n") and bool(text))


def echo_json(doc: object) -> None:
    """One JSON line (a streamed event): exact data, nothing a terminal acts on."""
    import click

    click.echo(json_line(doc))


def echo_rendered(text: str) -> None:
    """A view whose composer made every piece of data in it inert and which carries runner's
    own colour codes (the image preview of `runner show`): printed as it is."""
    import click

    click.echo(text, nl=False, color=True)


def json_line(doc: Any, warn: Callable[..., None] | None = None) -> str:
    """``doc`` as one line of strict JSON (RFC 8259: no NaN or Infinity; a non-finite number
    that reached a document is written null and named on stderr rather than breaking every
    JSON reader) with characters a terminal acts on escaped. ``warn`` prints that warning
    (default: ``echo``)."""
    try:
        text = json.dumps(doc, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        shown = "warning: a number that is not finite (NaN or Infinity) was written as null"
        (warn or echo)(shown, err=True)
        text = json.dumps(_finite(doc), ensure_ascii=False, default=str, allow_nan=False)
    return safe_json(text)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
