"""What a run does about the sandbox before its first command: say where commands cannot be
confined as the docs say, and start the sandbox's spawners early on a first run."""

from __future__ import annotations

from collections.abc import Callable

from ...expr.commandscope import runs_commands
from ...pipeline.compiler import Plan


def say_unconfined(plan: Plan, warn: Callable[[str], None]) -> None:
    """Where commands cannot be confined as the docs say (no bubblewrap, no Landlock), say so
    once in this process, when a step would run a command sandboxed."""
    if not any(s.sandbox and runs_commands(s) for s in plan.steps.values()):
        return
    from ...expr.confined import note_once

    said = note_once()
    if said is not None:
        warn(said)


def warm(plan: Plan, first_run: bool) -> None:
    """On a pipeline's first run, start the sandbox's spawners beside the work before the first
    command (a later run starts one at its first command: it may reuse them all)."""
    if not first_run:
        return
    steps = [s for s in plan.steps.values() if s.sandbox and runs_commands(s)]
    if steps:
        from ...expr.confined import warm as start_spawners

        start_spawners({s.network for s in steps})
