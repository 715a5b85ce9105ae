"""``${{ }}`` values inside a shell command: where each stands, and the command with them quoted.

What runs is not this text: values reach a command through its environment (shellenv.py), which
uses the places learnt here. The text with the values quoted in is what a shell step's key is
made of (as it was when it ran), so keys did not change when values moved to the environment.

A command such as ``echo '${{ params.title }}' > out/t.txt`` is split into its literal text and
its values. The literal text is scanned as /bin/sh would read it, to learn where each value
stands: bare (``echo ${{ x }}``), inside the user's single quotes or inside double quotes. Each
value is then quoted for exactly that place, so that after the shell's quote removal it is one
piece of text with the value's bytes, whatever it holds (quotes, ``$``, backticks, newlines):

- bare: in '...' (a value of only letters, digits and ``@%+:./-_`` that is no reserved word
  stays as it is);
- inside '...': each ``'`` becomes ``'\\''`` (close, an escaped quote, reopen);
- inside "...": ``\\``, ``"``, ``$`` and backtick get a backslash (the only ones special there).
- in an unquoted here-document's body: ``\\``, ``$`` and backtick get a backslash.

Where a value stands is learnt by runner/expr/_shellscan.py, which refuses every place it cannot
prove
(backticks, ``${...}``, arithmetic, comments, quoted here-documents, constructs dash and bash read
differently, text that ``sh -c`` or ``eval`` parse again); the pipeline then fails to compile,
naming the place. Such a value can go through the environment instead (``env: {TITLE: "${{ ...
}}"}`` and ``"$TITLE"`` in the command). A step that really wants a value pasted as shell text
says ``raw: true``, and `runner check` reports it. tests/security/test_shell_fuzz.py runs
generated commands under bash and dash to hold the scanner to what the shells do.

The shell step renders its key's text here; it and the ``exec`` check run shellenv's script.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from ..errors import Location
from ._shellgrammar import RESERVED, Place, Unquotable
from ._shellscan import Scanner

__all__ = ["Place", "Unquotable", "check_command", "places", "quote", "render", "render_command"]


_DQ_SPECIAL = re.compile(r'([\\"$`])')
_HEREDOC_SPECIAL = re.compile(r"([\\$`])")
# A bare value of only these stays unquoted (shlex's set without `=`, which would make an
# assignment of a command name, and `,`, which bash's brace expansion splits at).
_SAFE_BARE = re.compile(r"[\w@%+:./-]+", re.ASCII)
_NAME_AT_END = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*\Z")


def quote(value: str, place: Place) -> str:
    """``value`` quoted to stand at ``place``; the shell reads it back byte for byte."""
    if place is Place.BARE or place is Place.QUOTED:
        if place is Place.BARE and _SAFE_BARE.fullmatch(value) and value not in RESERVED:
            return value
        return "'" + value.replace("'", "'\\''") + "'"
    if place is Place.SINGLE:
        return value.replace("'", "'\\''")
    if place is Place.HEREDOC:  # a body's backslash quotes only \, $ and backtick
        return _HEREDOC_SPECIAL.sub(r"\\\1", value)
    return _DQ_SPECIAL.sub(r"\\\1", value)


def render(literals: Sequence[str], values: Sequence[str], places: Sequence[Place]) -> str:
    """``literals[0] + quote(values[0]) + literals[1] + ...`` (len(literals) == len(values)+1).

    Raises Unquotable for a value with a NUL byte (no command line can carry one).
    """
    out = [literals[0]]
    for value, place, before, lit in zip(values, places, literals[:-1], literals[1:], strict=True):
        if "\x00" in value:
            raise Unquotable("a value holds a NUL byte, which no shell command can carry")
        quoted = quote(value, place)
        if _NAME_AT_END.search(before) or (place is Place.BARE and before.endswith(("~", "{"))):
            # `$NAME` right before: the value's first letters would lengthen the name; `~` or
            # `{`: it would name a home directory or make a brace expansion. An empty "" (or
            # quotes around a bare value) ends the name and adds nothing.
            quoted = '""' + quoted if place is Place.DOUBLE else "''" + quoted
        out.append(quoted)
        out.append(lit)
    return "".join(out)


@lru_cache(maxsize=4096)
def places(literals: tuple[str, ...]) -> tuple[Place, ...]:
    """Where each gap between ``literals`` stands in the command. Raises Unquotable."""
    scanner = Scanner()
    found: list[Place] = []
    for i, text in enumerate(literals):
        scanner.feed(text)
        if i < len(literals) - 1:
            found.append(scanner.place(i + 1))
    scanner.finish()
    return tuple(found)


def render_parts(
    parts: Sequence[object], text_of: Callable[[object], str], *, raw: bool = False
) -> str:
    """A command from alternating literal strings and values (``text_of`` renders a value).

    With ``raw`` the values are pasted as shell text (the step asked for it). Raises Unquotable.
    """
    literals = _literals(parts)
    values = [text_of(p) for p in parts if not isinstance(p, str)]
    if raw:
        return "".join(lit + val for lit, val in zip(literals, [*values, ""], strict=True))
    return render(literals, values, places(literals))


def check_command(text: str, *, raw: bool, where: Location | None) -> None:
    """Compile-time: every ``${{ }}`` in command ``text`` stands where it can be quoted.

    Raises InvalidPipeline naming the place, and what to do instead.
    """
    if raw or "${{" not in text:
        return
    from ..errors import InvalidPipeline
    from . import Expression, Interpolation, compile_value

    compiled = compile_value(text, lambda _path: where)
    if isinstance(compiled, Expression):
        raise InvalidPipeline(
            "the whole command is one ${{ }}: its value would run as shell code",
            where=where,
            hint="write the command around the value (echo '${{ x }}'), or set `raw: true` "
            "if the value is meant to be shell text",
        )
    if isinstance(compiled, Interpolation):
        try:
            places(_literals(compiled.parts))
        except Unquotable as exc:
            raise InvalidPipeline(
                f"{exc.reason}: no quoting keeps a value data there",
                where=where,
                hint='pass it through the environment: env: {V: "${{ ... }}"} and "$V" in the '
                'command (with sh -c: sh -c \'... "$1"\' sh "$V"), or set `raw: true` to '
                "paste it as shell text",
            ) from None


def render_command(compiled: Any, context: Mapping[str, Any], *, raw: bool = False) -> str:
    """The command text of a compiled ``run`` with its values quoted where they stand (pasted
    as they are with ``raw``). Raises Unquotable."""
    if isinstance(compiled, str):  # no ${{ }}: the common case needs no expression machinery
        return compiled
    from . import Expression, Interpolation

    if isinstance(compiled, Interpolation):

        def text_of(part: object) -> str:
            return Interpolation([part]).evaluate(context)  # type: ignore[list-item]

        return render_parts(compiled.parts, text_of, raw=raw)
    if isinstance(compiled, Expression):
        if not raw:  # refused at compile time; a rule built by hand must not slip through
            raise Unquotable("the whole command is one ${{ }} and `raw` is not set")
        return Interpolation([compiled]).evaluate(context)
    return str(compiled)


def _literals(parts: Sequence[object]) -> tuple[str, ...]:
    literals = [""]
    for part in parts:
        if isinstance(part, str):
            literals[-1] += part
        else:
            literals.append("")
    return tuple(literals)
