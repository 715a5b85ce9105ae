"""A for_each step's elements, run through a window the size of its ``concurrency``.

Each element's arguments and key are worked out first (``prepare``): an element answered then
(cached, edited by hand, arguments that fail) takes no turn and no task. The others run as
tasks, at most ``width`` at once, with at most ``width`` more prepared and waiting, so a turn
that frees goes at once to an element ready to send (preparing it only then cost ~0.5 ms an
element, one after another, in every wave of provider calls). Only that window is held: a task
and a prepared execution made up front for every element cost ~1.3 KB an element (130 MB for
100,000), and the events of every element waited in memory for the step to end.

A turn is held until the element ends, or until its provider calls are all back
(providers/limits.py ``calling``): an llm element's reply lands, and the next element's call goes
out before this one records it (its ledger row, object, log, checks, events), as a plain
asyncio + httpx client sends its next request at once. 16 replies land together; when each turn
waited for its element's end, every wave of calls waited ~20 ms for that bookkeeping. An element
that calls again (a failed check's retry) takes a turn again first, before any new element
does. At most ``width`` more elements are left finishing, so the window stays bounded.

A step whose body never waits (a ``predictable`` type run in this process, tried once, without
checks, which may wait on a command) has its elements run one after another by the step's own
task, each prepared just before it runs, as its tasks ran when each had one: without a task
each, which cost as much as its journal row.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from ...providers.limits import HoldTurn
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
    turns = _Turns(width, lambda: start())
    # An element given a turn by another element's call starts in the step's context, not in
    # that element's (its slot, its call's admission).
    base = contextvars.copy_context()

    def ended(turn: _Turn, task: asyncio.Task[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())  # type: ignore[arg-type]
        turn.end()
        start()  # the freed turn goes to a prepared element at once, not on the driver's turn

    async def run(index: int, item: Any, ready: R, turn: _Turn) -> None:
        with HoldTurn(turn):
            outcomes[index] = await execute(index, item, ready)

    def start() -> None:
        # (2 x width tasks at most: those with a turn, and those recording what they got)
        while waiting and len(running) < 2 * width and not errors and turns.take_now():
            index, item, ready = waiting.popleft()
            turn = _Turn(turns)
            task = loop.create_task(run(index, item, ready, turn), context=base.copy())
            running.add(task)
            task.add_done_callback(partial(ended, turn))
        if wake and not wake[0].done():
            wake[0].set_result(None)

    async def turn() -> None:
        """Until a running element ends or gives its turn back; then the waiting ones take
        the free turns."""
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
        waiting.clear()  # a turn the cancelled ones give back starts no other element
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


class _Turns:
    """A for_each's ``width`` turns. An element that gives its turn back and calls again waits
    for one before any element not started (it has a reply's worth of work under way)."""

    def __init__(self, width: int, freed: Callable[[], None]) -> None:
        self.free = width
        self.freed = freed  # starts waiting elements on the turns free
        self.again: deque[asyncio.Future[None]] = deque()  # elements taking one again

    def take_now(self) -> bool:
        """Take a free turn for an element to start with, if there is one."""
        if self.free and not self.again:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self.again.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed over as it was cancelled: the next one takes it
            else:
                self.again.remove(waiter)
                if not self.again:
                    self.freed()  # (new elements no longer wait behind it)
            raise

    def give(self) -> None:
        while self.again:
            waiter = self.again.popleft()
            if not waiter.done():
                waiter.set_result(None)  # handed over: ``free`` stays as it is
                return
        self.free += 1
        self.freed()


class _Turn:
    """One element's turn: held from its start until its end, except while none of its provider
    calls is out once one has been (``calling()`` enters it around each call)."""

    __slots__ = ("calls", "held", "turns")

    def __init__(self, turns: _Turns) -> None:
        self.turns = turns
        self.held = True  # it starts with one
        self.calls = 0

    async def __aenter__(self) -> None:
        if not self.held:
            await self.turns.take()
            self.held = True
        self.calls += 1

    async def __aexit__(self, *exc: object) -> None:
        self.calls -= 1
        if self.calls == 0 and self.held:
            self.held = False
            self.turns.give()

    def end(self) -> None:
        if self.held:
            self.held = False
            self.turns.give()


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
