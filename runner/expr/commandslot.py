"""How a command holds one of the engine's ``--jobs`` slots while its process runs.

The engine sets ``command_slot`` for each execution (engine/run/slots.py); ``run_shell`` enters
it around a command's process, from its start to its exit. Outside an execution (a test,
``runner check``) it is None and nothing bounds a command. Its own module: the engine sets it on
every apply, and shellrun (asyncio, subprocess) loads only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar

command_slot: ContextVar[Callable[[], AbstractAsyncContextManager[None]] | None] = ContextVar(
    "runner_command_slot", default=None
)
