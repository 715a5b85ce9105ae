"""A for_each step's elements, run through a window the size of its ``concurrency``.

Each element's arguments and key are worked out first (``prepare``): an element answered then
(cached, edited by hand, arguments that fail) takes no turn and no task. The others run as
tasks, at most ``width`` at once, with at most ``width`` more prepared and waiting, so a turn
that frees goes at once to an element ready to send (preparing it only then cost ~0.5 ms an
element, one after another, in every wave of provider calls). Only that window is held: a task
and a prepared execution made up front for every element cost ~1.3 KB an element (130 MB for
100,000), and the events of every element waited in memory for the step to end.

A step whose body never waits (a ``predictable`` type run in this process, tried once, without
checks, which may wait on a command) has its elements run one after another by the step's own
task, each prepared just before it runs, as its tasks ran when each had one: without a task
each, which cost as much as its journal row.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .outcomes import ElementOutcome

R = TypeVar("R")

# Elements between two writes of the events and cached rows held so far (the recorder holds
# them for the step's end otherwise), and between two turns given to the event loop (elements
# that finish without waiting then end, and other steps go on, while many are started).
FLUSH_EVERY = 500
YIELD_EVERY = 64


async def run_elements(
    items: Sequence[Any],
    *,
    width: int,
    prepare: Callable[[int, Any], ElementOutcome | R],
    execute: Callable[[int, Any, R], Awaitable[ElementOutcome]],
    flush: Callable[[], None],
    inline: bool = False,
) -> list[ElementOutcome]:
    """Every element's outcome, in order. ``prepare(index, item)`` answers an element at once or
    gives what ``execute(index, item, prepared)`` runs it from; at most ``width`` run at once
    (``inline``: one after another, in this task). ``flush()`` writes what the recorder holds.

    An error out of an element (a full disk) starts no other element; it is raised once the
    running ones have ended (none is left running with an exception no one retrieves). A
    cancelled step cancels its running elements and waits for them to record it."""
    if inline:
        return await _one_by_one(items, prepare=prepare, execute=execute, flush=flush)
    loop = asyncio.get_running_loop()
    outcomes: list[ElementOutcome | None] = [None] * len(items)
    waiting: deque[tuple[int, Any, R]] = deque()
    running: set[asyncio.Task[None]] = set()
    errors: list[BaseException] = []
    wake: list[asyncio.Future[None]] = []  # the driver's wait for a turn to free, if any

    def ended(task: asyncio.Task[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())  # type: ignore[arg-type]
        start()  # the freed turn goes to a prepared element at once, not on the driver's turn
        if wake and not wake[0].done():
            wake[0].set_result(None)

    async def run(index: int, item: Any, ready: R) -> None:
        outcomes[index] = await execute(index, item, ready)

    def start() -> None:
        while waiting and len(running) < width and not errors:
            index, item, ready = waiting.popleft()
            task = loop.create_task(run(index, item, ready))
            running.add(task)
            task.add_done_callback(ended)

    async def turn() -> None:
        """Until a running element ends; then the waiting ones take the free turns."""
        if running:
            wake[:] = [loop.create_future()]
            await wake[0]
        start()

    try:
        for index, item in enumerate(items):
            if errors:
                break
            ready = prepare(index, item)
            if isinstance(ready, ElementOutcome):
                outcomes[index] = ready
            else:
                waiting.append((index, item, ready))
                # Started now, it runs at the driver's next wait, beside the others started
                # since: the calls of one moment share their journal commits.
                start()
                while len(waiting) >= width and not errors:
                    await turn()
            if index % FLUSH_EVERY == FLUSH_EVERY - 1:
                flush()
            if index % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        while (running or waiting) and not errors:
            await turn()
        while running:
            await turn()
    except BaseException:
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(set(running))
        raise
    if errors:
        raise errors[0]
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(items)
    return done


async def _one_by_one(
    items: Sequence[Any],
    *,
    prepare: Callable[[int, Any], ElementOutcome | R],
    execute: Callable[[int, Any, R], Awaitable[ElementOutcome]],
    flush: Callable[[], None],
) -> list[ElementOutcome]:
    outcomes: list[ElementOutcome] = []
    for index, item in enumerate(items):
        ready = prepare(index, item)
        if isinstance(ready, ElementOutcome):
            outcomes.append(ready)
        else:
            outcomes.append(await execute(index, item, ready))
        if index % FLUSH_EVERY == FLUSH_EVERY - 1:
            flush()
        if index % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)  # a cancel, a commit's timer and other steps get a turn
    return outcomes
