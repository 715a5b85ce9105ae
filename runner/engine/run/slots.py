"""One execution's hold on a ``--jobs`` slot, given back while it only waits on a provider.

``--jobs`` bounds CPU work. An execution holds a slot from start to end, except while every one
of its provider calls is waiting (an image step's iterations wait side by side): the first
waiting call gives the slot back, the last one to finish takes a slot again before the step goes
on with CPU work (storing, checks). How many calls wait at once is bounded by the step's
``concurrency`` and the provider's ``max_concurrency``, not here.

A command (a `shell` step's, an `exec` check's) runs on its execution's slot and gives it back
when its process exits (``command``): what follows runs on the event loop's one thread, which
bounds it already, while the next command takes the slot. Another command of the same
execution (a retry, a check) takes a slot again before it starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class CpuSlot:
    """``async with CpuSlot(jobs):`` holds one slot of ``jobs``; ``released()`` lends it back."""

    def __init__(self, jobs: asyncio.Semaphore) -> None:
        self.jobs = jobs
        self.held = False
        self.waiting = 0
        self.commands = 0  # of this execution's commands, running

    async def __aenter__(self) -> CpuSlot:
        await self.jobs.acquire()
        self.held = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.held:
            self.held = False
            self.jobs.release()

    def command(self) -> _ForCommand:
        """``async with``: a command's process runs (expr/commandslot.py). It runs on this
        execution's slot, taken again first if it was given back; at its exit the slot is
        given back, and the next command waiting for one starts before this execution goes
        on with its own work on the event loop (storing, the journal), which no slot bounds."""
        return _ForCommand(self)

    @asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        self.waiting += 1
        if self.held:
            self.held = False
            self.jobs.release()
        try:
            yield
        finally:
            self.waiting -= 1
            if self.waiting == 0 and not self.held:
                await self.jobs.acquire()
                if self.held or self.waiting:
                    # Another waiter took the slot back meanwhile, or a new wait has begun.
                    self.jobs.release()
                else:
                    self.held = True


class _ForCommand:
    def __init__(self, slot: CpuSlot) -> None:
        self.slot = slot

    async def __aenter__(self) -> None:
        slot = self.slot
        if not slot.held:
            await slot.jobs.acquire()
            slot.held = True
        slot.commands += 1

    async def __aexit__(self, *exc: object) -> None:
        slot = self.slot
        slot.commands -= 1
        if slot.held and not slot.commands and not slot.waiting:
            slot.held = False
            slot.jobs.release()
            if slot.jobs.locked():  # one was waiting: its command starts now, not after ours
                await asyncio.sleep(0)
