"""Opening the project's state for commands given no pipeline file (a module of its own, so
commands import it without importing one another)."""

from __future__ import annotations

from typing import Any


def open_state(state_dir: str | None, readonly: bool = True) -> Any:
    from ...engine.run.apply import State
    from ...engine.run.locate import state_dir_here

    # Commands without a pipeline file find the project from the working directory, like git.
    return State.open(state_dir_here(state_dir), readonly=readonly)
