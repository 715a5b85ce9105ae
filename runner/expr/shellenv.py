"""``${{ }}`` values reach a shell command through its environment, never through its text.

A command such as ``echo 'title: ${{ params.title }}' > out/t.txt`` runs as the script
``echo 'title: '"${RUNNER_VALUE_1}"'' > out/t.txt`` with ``RUNNER_VALUE_1`` set to the value in
the command's environment. The shell parses only the user's text and runner's own references; a
value is the result of an expansion, which no shell parses again. Each reference is quoted for
the place it stands (learnt by runner/expr/_shellscan.py, as for quoting):

- bare: ``"${RUNNER_VALUE_1}"`` (one word, never split, globbed or a reserved word);
- inside the user's '...': ``'"${RUNNER_VALUE_1}"'`` (close, expand, reopen);
- inside "..." or an unquoted here-document's body: ``${RUNNER_VALUE_1}``.

So a mistake of the scanner can at worst print the wrong text (a reference left inside quotes
that do not expand it), never run a value: the guarantee no longer rests on the scanner being
right. It does not reach further than the shell runner starts: a command that hands an expanded
value to something that runs text (``sh -c "$1"``, ``eval``, ``| sh``, bash arithmetic on it) is
the user's program reading data as code; the scanner refuses the forms it knows, and the
sandbox is what bounds the rest.

The names share a reserved prefix (``RUNNER_VALUE_``): a step whose ``env:`` or ``pass_env`` uses
it, or whose command text names it, is refused at compile time, so a reference always expands
runner's value. The variables are given to that command (and what it starts) only: the step's key
is still made from the values quoted into the command text (shellquote.render_command), so keys
of existing pipelines did not change, and the variables never reach the journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidPipeline, Location
from .unquotable import Unquotable

if TYPE_CHECKING:  # the grammar and scanner load with the first value (~3 ms of a start-up)
    from ._shellgrammar import Place

__all__ = ["PREFIX", "Script", "check_names", "command", "script_command"]

PREFIX = "RUNNER_VALUE_"


@dataclass(frozen=True)
class Script:
    """A command as /bin/sh runs it: ``text`` with references, ``values`` (name -> value) to
    add to its environment."""

    text: str
    values: dict[str, str] = field(default_factory=dict)

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the values added (check_names keeps the user's names out of the way)."""
        return {**env, **self.values} if self.values else dict(env)

    def to_json(self) -> dict[str, Any]:
        return {"script": self.text, "values": dict(self.values)}


def reference(name: str, place: Place) -> str:
    """The text that expands variable ``name`` as one piece of text at ``place``."""
    from ._shellgrammar import Place

    if place is Place.SINGLE:
        return f"'\"${{{name}}}\"'"
    if place is Place.DOUBLE or place is Place.HEREDOC:
        return f"${{{name}}}"
    return f'"${{{name}}}"'


def script(literals: Sequence[str], values: Sequence[str], found: Sequence[Place]) -> Script:
    """The script for ``literals`` around ``values`` at ``found`` places. Raises Unquotable for
    a value with a NUL byte (no environment can carry one)."""
    out = [literals[0]]
    env: dict[str, str] = {}
    for i, (value, place, lit) in enumerate(zip(values, found, literals[1:], strict=True), 1):
        if "\x00" in value:
            raise Unquotable("a value holds a NUL byte, which no shell command can carry")
        name = f"{PREFIX}{i}"
        env[name] = value
        out.append(reference(name, place))
        out.append(lit)
    return Script("".join(out), env)


def command(compiled: Any, context: Mapping[str, Any], *, raw: bool = False) -> tuple[str, Script]:
    """A compiled ``run`` in ``context``: its text with the values quoted in (what the step's
    key is made of, as before values went by environment; pasted with ``raw``), and the script
    that runs (its values by environment; the same text with ``raw``). Each value is evaluated
    once. Raises Unquotable."""
    if isinstance(compiled, str):  # no ${{ }}: the common case needs no expression machinery
        return compiled, Script(compiled)
    from . import Expression, Interpolation
    from .shellquote import _literals, places, render

    if isinstance(compiled, Interpolation):
        literals = _literals(compiled.parts)
        values = [
            Interpolation([p]).evaluate(context) for p in compiled.parts if not isinstance(p, str)
        ]
        if raw:
            text = "".join(lit + v for lit, v in zip(literals, [*values, ""], strict=True))
            return text, Script(text)
        found = places(literals)
        return render(literals, values, found), script(literals, values, found)
    if isinstance(compiled, Expression):
        if not raw:  # refused at compile time; a rule built by hand must not slip through
            raise Unquotable("the whole command is one ${{ }} and `raw` is not set")
        text = Interpolation([compiled]).evaluate(context)
        return text, Script(text)
    return str(compiled), Script(str(compiled))


def script_command(compiled: Any, context: Mapping[str, Any], *, raw: bool = False) -> Script:
    """The script of a compiled ``run``: its values by environment (pasted with ``raw``).
    Raises Unquotable."""
    return command(compiled, context, raw=raw)[1]


def check_names(
    run: object, env_names: Iterable[object], pass_env: Iterable[object], where: Location | None
) -> None:
    """Compile-time: the reserved prefix is runner's alone. Raises InvalidPipeline for an
    ``env:`` or ``pass_env`` name that starts with it, or a command text that names it."""
    for what, names in (("env", env_names), ("pass_env", pass_env)):
        for name in names:
            if isinstance(name, str) and name.startswith(PREFIX):
                raise InvalidPipeline(
                    f"{what}: {name} starts with {PREFIX}, which names the values runner "
                    "gives the command",
                    where=where,
                    hint="choose another name",
                )
    if isinstance(run, str) and PREFIX in run:
        raise InvalidPipeline(
            f"the command names {PREFIX}..., the variables runner gives the command its "
            "${{ }} values in",
            where=where,
            hint="write ${{ }} where the value stands, or use a variable of your own (env:)",
        )
