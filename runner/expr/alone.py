"""Commands whose environment holds a secret run alone among the process's confined commands.

The sandbox gives an apply's commands one pid namespace (runner/expr/confined.py): runner and
the spawner are out of their view, but two commands running at the same time see each other,
and one can read the other's ``/proc/PID/environ`` (measured on kernel 6.18: Landlock refuses
``/proc/PID/mem`` there, not ``environ``). A secret a step is given (a ``pass_env`` credential,
a provider's key: whatever secretmask knows) would reach any step running beside it. So a
command holding one waits for the running ones to end and runs with no other beside it, and
the others wait while it runs or waits. A pid namespace per command would cost ~0.5 ms of CPU
a command (a user namespace and a /proc of its own); this costs nothing where no command
holds a secret, and parallelism only where one does.

Process-wide (watch and serve run applies from several threads, each its own event loop, on
the same spawners): a lock guards the counts, and a waiter polls every few milliseconds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

_POLL = 0.005


class Alone:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shared = 0  # commands running beside each other
        self._alone = False  # a command holding a secret runs
        self._wanting = 0  # commands holding a secret waiting: no new shared one starts

    def _take(self, alone: bool) -> bool:
        with self._lock:
            if self._alone:
                return False
            if alone:
                if self._shared:
                    return False
                self._alone = True
                return True
            if self._wanting:
                return False
            self._shared += 1
            return True

    async def enter(self, alone: bool) -> None:
        """Wait until a command holding a secret (``alone``) or another may run."""
        if self._take(alone):
            return
        if alone:
            with self._lock:
                self._wanting += 1
        try:
            while not self._take(alone):
                await asyncio.sleep(_POLL)
        finally:
            if alone:
                with self._lock:
                    self._wanting -= 1

    def leave(self, alone: bool) -> None:
        with self._lock:
            if alone:
                self._alone = False
            else:
                self._shared -= 1


GATE = Alone()


def holds_secret(env: Mapping[str, str]) -> bool:
    """Whether a command's environment holds a value secretmask knows as a secret."""
    from ..source import secretmask

    return secretmask.holds_secret(list(env.values()))
