"""What a step's commands may touch: set by the engine around a step's checks and its `when:`.

An ``exec`` check or a ``when: {exec: ...}`` runs confined (runner/expr/confined.py) to the
files its step declares: the engine sets ``command_scope`` to the step's ``sandbox:`` and
``network:`` and to the files its key names, and the check adds its own ``inputs:`` and script.
Outside the engine (a test calling a rule) the default confines a command to the check's own
files. Its own module, as commandslot.py: setting it must not load asyncio or the sandbox.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any, NamedTuple


class CommandScope(NamedTuple):
    """What a step's commands may touch: sandboxed or not, the network, the files it names.
    (A NamedTuple: made at every start-up, where a frozen dataclass cost ~0.4 ms.)"""

    sandbox: bool = True  # false: the step said `sandbox: false`
    network: bool = False  # the step said `network: true`
    files: tuple[str, ...] = ()  # the step's files a check may read, relative to the root


# (None: outside the engine, which confines a command to the check's own files)
_scope: ContextVar[CommandScope | None] = ContextVar("runner_command_scope", default=None)
_DEFAULT = CommandScope()


class _Scope:
    """``command_scope.get()`` / ``.set()`` / ``.reset()``, the default a CommandScope()."""

    def get(self) -> CommandScope:
        return _scope.get() or _DEFAULT

    def set(self, scope: CommandScope) -> Token[CommandScope | None]:
        return _scope.set(scope)

    def reset(self, token: Token[CommandScope | None]) -> None:
        _scope.reset(token)


command_scope = _Scope()


class scoped:
    """``with scoped(sandbox, network, files):`` sets command_scope for the block."""

    def __init__(self, sandbox: bool, network: bool, files: tuple[str, ...] = ()) -> None:
        self.scope = CommandScope(sandbox, network, files)

    def __enter__(self) -> CommandScope:
        self.token: Token[CommandScope | None] = command_scope.set(self.scope)
        return self.scope

    def __exit__(self, *exc: object) -> None:
        command_scope.reset(self.token)


def runs_commands(step: Any) -> bool:
    """Whether a compiled step runs commands: a shell step, or an exec check or `when:`."""
    if step.uses == "shell":
        return True
    rules = [*step.checks, *((step.when,) if step.when is not None else ())]
    while rules:
        rule = rules.pop()
        if rule.kind == "exec":
            return True
        rules.extend(rule.children())
    return False


def confinement_of(step: Any) -> dict[str, bool]:
    """What `plan` says of a step's sandbox, when it runs commands and says other than the
    default: {"sandbox": False} and/or {"network": True}; else {}."""
    if not runs_commands(step):
        return {}
    said: dict[str, bool] = {}
    if not step.sandbox:
        said["sandbox"] = False
    if step.network:
        said["network"] = True
    return said


def confinement_lines(steps: list[dict[str, Any]]) -> list[str]:
    """The console's words for a plan document's steps' ``sandbox``/``network`` fields."""
    lines = []
    for s in steps:
        if s.get("sandbox") is False:
            lines.append(f"note: {s['id']}: runs unsandboxed (sandbox: false)")
        elif s.get("network"):
            lines.append(f"note: {s['id']}: its commands may reach the network (network: true)")
    return lines
