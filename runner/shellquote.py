"""``${{ }}`` values inside a shell command: data, never shell syntax.

A command such as ``echo '${{ params.title }}' > out/t.txt`` is split into its literal text and
its values. The literal text is scanned as /bin/sh would read it, to learn where each value
stands: bare (``echo ${{ x }}``), inside the user's single quotes or inside double quotes. Each
value is then quoted for exactly that place, so that after the shell's quote removal it is one
piece of text with the value's bytes, whatever it holds (quotes, ``$``, backticks, newlines):

- bare: ``shlex.quote`` (a value of only safe characters stays as it is);
- inside '...': each ``'`` becomes ``'\\''`` (close, an escaped quote, reopen);
- inside "...": ``\\``, ``"``, ``$`` and backtick get a backslash (the only ones special there).

Places where no quoting is safe are refused when the pipeline compiles, naming the place: inside
backticks, ``${...}``, ``$((...))``, a comment, a here-document, or right after a backslash.
Such a value can go through the environment instead (``env: {TITLE: "${{ ... }}"}`` and
``"$TITLE"`` in the command). A step that really wants a value pasted as shell text says
``raw: true``, and `runner check` reports it.

The shell step and the ``exec`` check both render their commands here.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from .errors import Location


class Place(enum.Enum):
    BARE = "bare"
    SINGLE = "single"
    DOUBLE = "double"


class Unquotable(ValueError):
    """A value stands where no quoting keeps it data; ``reason`` says where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_DQ_SPECIAL = re.compile(r'([\\"$`])')
_WORD_START = frozenset(" \t\n;&|()<>")
_NAME_AT_END = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*\Z")


def quote(value: str, place: Place) -> str:
    """``value`` quoted to stand at ``place``; the shell reads it back byte for byte."""
    if place is Place.BARE:
        return shlex.quote(value)
    if place is Place.SINGLE:
        return value.replace("'", "'\\''")
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
        if _NAME_AT_END.search(before):
            # `$NAME` right before: the value's first letters would lengthen the name. An
            # empty "" (or quotes around a bare value) ends the name and adds nothing.
            quoted = '""' + quoted if place is Place.DOUBLE else "''" + quoted
        out.append(quoted)
        out.append(lit)
    return "".join(out)


@lru_cache(maxsize=4096)
def places(literals: tuple[str, ...]) -> tuple[Place, ...]:
    """Where each gap between ``literals`` stands in the command. Raises Unquotable."""
    scanner = _Scanner()
    found: list[Place] = []
    for i, text in enumerate(literals):
        scanner.feed(text)
        if i < len(literals) - 1:
            found.append(scanner.place(i + 1))
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


class _Frame(enum.Enum):
    CMD = "command"  # the command itself, or inside $( )
    SINGLE = "single"
    DOUBLE = "double"
    BACKTICK = "backticks"
    PARAM = "${...}"
    ARITH = "$((...))"


class _Scanner:
    """Enough of the POSIX shell grammar to know the quoting at a point of the text."""

    def __init__(self) -> None:
        self.stack: list[_Frame] = [_Frame.CMD]
        self.depth: list[int] = [0]  # open ( per frame, to find the ) closing a $(
        self.escaped = False
        self.comment = False
        self.prev = "\n"
        self.heredocs: list[tuple[str, bool]] = []  # (delimiter, strip tabs) awaiting a newline
        self.in_heredoc: tuple[str, bool] | None = None
        self.line = ""  # the current line of a here-document body
        self.pending = ""  # text held back while an operator or delimiter is incomplete

    def place(self, ordinal: int) -> Place:
        where = f"${{{{ }}}} number {ordinal} of the command"
        if self.in_heredoc is not None:
            raise Unquotable(f"{where} is inside a here-document")
        if self.comment:
            raise Unquotable(f"{where} is inside a comment")
        if self.escaped:
            raise Unquotable(f"{where} follows a backslash")
        if self.pending:
            raise Unquotable(f"{where} follows '$' or '<<', whose meaning depends on it")
        top = self.stack[-1]
        if top is _Frame.CMD:
            return Place.BARE
        if top is _Frame.SINGLE:
            return Place.SINGLE
        if top is _Frame.DOUBLE:
            return Place.DOUBLE
        raise Unquotable(f"{where} is inside {top.value}")

    def feed(self, text: str) -> None:
        text = self.pending + text
        self.pending = ""
        i = 0
        while i < len(text):
            i = self._step(text, i)

    def _step(self, text: str, i: int) -> int:
        c = text[i]
        if self.in_heredoc is not None:
            return self._heredoc_char(c, i)
        if self.comment:
            if c == "\n":
                self.comment = False
                self._newline()
            return i + 1
        if self.escaped:
            self.escaped = False
            self.prev = "x"
            return i + 1
        top = self.stack[-1]
        if top is _Frame.SINGLE:
            if c == "'":
                self.stack.pop()
            self.prev = c
            return i + 1
        if c == "\\":
            self.escaped = True
            return i + 1
        if c == "`":
            if top is _Frame.BACKTICK:
                self.stack.pop()
            else:
                self.stack.append(_Frame.BACKTICK)
            self.prev = c
            return i + 1
        if c == "$":
            return self._dollar(text, i)
        if top is _Frame.DOUBLE:
            if c == '"':
                self.stack.pop()
            self.prev = c
            return i + 1
        return self._unquoted(text, i, top)

    def _dollar(self, text: str, i: int) -> int:
        rest = text[i + 1 : i + 3]
        if len(rest) < 2 and i + len(rest) + 1 == len(text):
            self.pending = text[i:]  # "$" or "$(" at the end: decided by what follows
            return len(text)
        if rest.startswith("(("):
            self._push(_Frame.ARITH)
            return i + 3
        if rest.startswith("("):
            self._push(_Frame.CMD)
            return i + 2
        if rest.startswith("{"):
            self._push(_Frame.PARAM)
            return i + 2
        self.prev = "$"
        return i + 1

    def _push(self, frame: _Frame) -> None:
        self.stack.append(frame)
        self.depth.append(0)
        self.prev = "("

    def _unquoted(self, text: str, i: int, top: _Frame) -> int:
        c = text[i]
        if c == "'" and top is not _Frame.ARITH:
            self.stack.append(_Frame.SINGLE)
        elif c == '"':
            self.stack.append(_Frame.DOUBLE)
        elif c == "#" and self.prev in _WORD_START and top is _Frame.CMD:
            self.comment = True
        elif c == "(":
            self.depth[-1] += 1
        elif c == ")" and top in (_Frame.CMD, _Frame.ARITH) and len(self.stack) > 1:
            if self.depth[-1] == 0:
                self.stack.pop()
                self.depth.pop()
                if top is _Frame.ARITH and text[i + 1 : i + 2] == ")":
                    return i + 2
            else:
                self.depth[-1] -= 1
        elif c == ")" and self.depth[-1] > 0:
            self.depth[-1] -= 1
        elif c == "}" and top is _Frame.PARAM:
            self.stack.pop()
            self.depth.pop()
        elif c == "<" and top is _Frame.CMD:
            return self._maybe_heredoc(text, i)
        elif c == "\n":
            self._newline()
            return i + 1
        self.prev = c
        return i + 1

    def _maybe_heredoc(self, text: str, i: int) -> int:
        m = re.match(r"<<(-?)[ \t]*", text[i:])
        if m is None or text[i + 2 : i + 3] == "<":  # '<' or '<<<' (a here-string)
            self.prev = "<"
            return i + (3 if text[i + 1 : i + 3] == "<<" else 1)
        word = re.match(r"""(?:'[^']*'|"[^"]*"|\\.|[^\s;&|<>()'"\\])+""", text[i + m.end() :])
        end = i + m.end() + (word.end() if word else 0)
        if word is None or end == len(text):
            self.pending = text[i:]  # the delimiter may go on in the next literal
            return len(text)
        delimiter = re.sub(r"""['"\\]""", "", word.group(0))
        self.heredocs.append((delimiter, m.group(1) == "-"))
        self.prev = "x"
        return end

    def _newline(self) -> None:
        self.prev = "\n"
        if self.heredocs and self.stack[-1] is _Frame.CMD:
            self.in_heredoc = self.heredocs.pop(0)
            self.line = ""

    def _heredoc_char(self, c: str, i: int) -> int:
        assert self.in_heredoc is not None
        if c != "\n":
            self.line += c
            return i + 1
        delimiter, strip = self.in_heredoc
        line = self.line.lstrip("\t") if strip else self.line
        self.line = ""
        if line == delimiter:
            self.in_heredoc = self.heredocs.pop(0) if self.heredocs else None
        return i + 1


def check_command(text: str, *, raw: bool, where: Location | None) -> None:
    """Compile-time: every ``${{ }}`` in command ``text`` stands where it can be quoted.

    Raises InvalidPipeline naming the place, and what to do instead.
    """
    if raw or "${{" not in text:
        return
    from .errors import InvalidPipeline
    from .expr import Expression, Interpolation, compile_value

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
                f"{exc.reason}, where no quoting keeps a value from becoming shell code",
                where=where,
                hint='pass it through the environment: env: {V: "${{ ... }}"} and "$V" in the '
                "command (or set `raw: true` to paste it as shell text)",
            ) from None


def render_command(compiled: Any, context: Mapping[str, Any], *, raw: bool = False) -> str:
    """The command text of a compiled ``run`` with its values quoted where they stand (pasted
    as they are with ``raw``). Raises Unquotable."""
    if isinstance(compiled, str):  # no ${{ }}: the common case needs no expression machinery
        return compiled
    from .expr import Expression, Interpolation

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
