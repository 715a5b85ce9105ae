"""Printing for the CLI: every command prints through ``echo`` (a line: data in it is inert,
a newline in it shown as ``\\n``) or ``echo_block`` (a document runner laid out: its lines stay,
control characters its data carried become visible). ``--json`` goes through ``app.emit_json``
(``safe_json``). tests/security/test_terminal_escapes.py checks that no command prints any
other way.
"""

from __future__ import annotations

import click

from ...source.termtext import safe, safe_block, safe_json

__all__ = ["echo", "echo_block", "echo_json", "echo_rendered", "safe", "safe_block", "safe_json"]


def echo(line: object = "", *, err: bool = False) -> None:
    """One line runner composed with data in it, printed inert."""
    click.echo(safe(line), err=err)


def echo_block(text: str, *, err: bool = False) -> None:
    """Lines runner laid out (a table, a summary, a rendered template), printed inert; a final
    newline is added only when missing."""
    click.echo(safe_block(text), err=err, nl=not text.endswith("\n") and bool(text))


def echo_json(doc: object) -> None:
    """One JSON line (a streamed event): exact data, nothing a terminal acts on."""
    from .app import json_line

    click.echo(json_line(doc))


def echo_rendered(text: str) -> None:
    """A view whose composer made every piece of data in it inert and which carries runner's
    own colour codes (the image preview of `runner show`): printed as it is."""
    click.echo(text, nl=False, color=True)
