"""Blocking work handed to worker threads, with the callers resuming in the order they called.

An llm reply is made durable (fsync of its object file and directory) before the ledger
records it. On the event loop, the fsyncs of 16 replies that arrive together run one after the
other while every other call waits; in worker threads they overlap. The callers still resume in
the order they handed their work over, so a for_each's elements finish in the order they would
with the work done inline, whichever thread ends first (the console stays reproducible).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The last caller's turn, per event loop: each caller waits for the one before it.
_tails: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[None]] = (
    weakref.WeakKeyDictionary()
)


async def in_order(work: Callable[[], T]) -> T:
    """``work()`` in a worker thread; returns (or raises) after every earlier caller on this
    loop has resumed."""
    loop = asyncio.get_running_loop()
    done = loop.run_in_executor(None, work)
    before = _tails.get(loop)
    mine: asyncio.Future[None] = loop.create_future()
    _tails[loop] = mine
    try:
        if before is not None:
            # Whatever the work's outcome, this caller's turn comes after the previous one's.
            await asyncio.wait([done])
            await asyncio.shield(before)  # a cancelled caller must not cancel the chain
        return await done
    finally:
        if not mine.done():
            mine.set_result(None)
        if _tails.get(loop) is mine:
            del _tails[loop]
