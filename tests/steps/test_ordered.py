"""runner.steps.ordered: work in threads, callers resuming in call order, together.

Real threads and a real event loop. A loop-turn counter (a callback that re-schedules itself
each turn) tells which callers resumed in the same turn.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from runner.steps.ordered import in_order


class Turns:
    """Counts the event loop's turns while it runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.n = 0
        self.loop = loop
        self.stopped = False
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        if not self.stopped:
            self.n += 1
            self.loop.call_soon(self._tick)


def test_callers_resume_in_call_order_whatever_order_the_work_ends_in() -> None:
    async def main() -> list[int]:
        resumed: list[int] = []

        async def call(k: int) -> None:
            # the first caller's work ends last
            await in_order(lambda: time.sleep(0.05 * (4 - k)))
            resumed.append(k)

        await asyncio.gather(*(call(k) for k in range(5)))
        return resumed

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_callers_whose_turn_came_together_resume_in_one_loop_turn() -> None:
    """The head's work ends last: every caller behind it, done already, resumes with it in the
    same turn of the loop, in order (their next writes then share one journal commit)."""

    async def main() -> tuple[list[tuple[int, int]], int]:
        loop = asyncio.get_running_loop()
        turns = Turns(loop)
        gate = threading.Event()
        resumed: list[tuple[int, int]] = []
        finished = 0

        def work(k: int) -> int:
            nonlocal finished
            if k == 0:
                gate.wait(10)
            finished += 1
            return k

        async def call(k: int) -> None:
            assert await in_order(lambda: work(k)) == k
            resumed.append((k, turns.n))

        tasks = [asyncio.create_task(call(k)) for k in range(4)]
        while finished < 3:  # the three behind the head are done; none may resume yet
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert resumed == []
        gate.set()
        await asyncio.gather(*tasks)
        turns.stopped = True
        return resumed, turns.n

    resumed, _ = asyncio.run(main())
    assert [k for k, _ in resumed] == [0, 1, 2, 3]
    assert len({turn for _, turn in resumed}) == 1, resumed


def test_an_error_is_raised_to_its_caller_in_its_turn() -> None:
    async def main() -> list[str]:
        seen: list[str] = []

        def boom() -> None:
            time.sleep(0.05)
            raise ValueError("disk")

        async def first() -> None:
            try:
                await in_order(boom)
            except ValueError as exc:
                seen.append(f"first {exc}")

        async def second() -> None:
            await in_order(lambda: None)
            seen.append("second")

        await asyncio.gather(first(), second())
        return seen

    assert asyncio.run(main()) == ["first disk", "second"]


def test_a_cancelled_caller_keeps_its_work_and_holds_no_one_back() -> None:
    async def main() -> tuple[bool, list[str]]:
        gate = threading.Event()
        ran = threading.Event()
        order: list[str] = []

        def slow() -> None:
            gate.wait(10)
            ran.set()

        head = asyncio.create_task(in_order(slow))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(in_order(lambda: "b"))
        await asyncio.sleep(0.05)
        head.cancel()
        with pytest.raises(asyncio.CancelledError):
            await head
        assert await asyncio.wait_for(second, 5) == "b"  # not held back by the head's work
        order.append("second resumed")
        gate.set()
        await asyncio.get_running_loop().run_in_executor(None, ran.wait, 5)
        return ran.is_set(), order

    ran, order = asyncio.run(main())
    assert ran  # the cancelled caller's work ran to its end in its thread
    assert order == ["second resumed"]
