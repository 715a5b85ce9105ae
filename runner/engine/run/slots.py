"""One execution's hold on a ``--jobs`` slot, given back while it only waits on a provider.

``--jobs`` bounds CPU work. An execution holds a slot from start to end, except while every one
of its provider calls is waiting (an image step's iterations wait side by side): the first
waiting call gives the slot back, the last one to finish takes a slot again before the step goes
on with CPU work (storing, checks). How many calls wait at once is bounded by the step's
``concurrency`` and the provider's ``max_concurrency``, not here.
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

    async def __aenter__(self) -> CpuSlot:
        await self.jobs.acquire()
        self.held = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.held:
            self.held = False
            self.jobs.release()

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
