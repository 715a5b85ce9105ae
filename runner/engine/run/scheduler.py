"""The scheduler: which steps are ready, the ``--jobs`` slots, and cancellation.

It starts each step once all its dependencies have an outcome, at most ``jobs`` executions
holding a CPU slot at once, and stops starting steps once the run is aborted or cancelled. What
a step does (and what is written about it) is the interpreter's and the recorder's business.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from contextvars import Token
from typing import Any

from ...expr.commandslot import command_slot
from ...pipeline.compiler import CompiledStep, Plan
from ...providers.limits import LendSlots
from .outcomes import StepOutcome, StepStatus
from .slots import CpuSlot

CANCEL_POLL_S = 0.2  # how often a run looks for `runner runs cancel` from another process
STOP_GRACE_S = 2.0  # cancelled steps have this long to stop before the run ends without them
YIELD_S = 0.05  # steps answered at once give the event loop a turn at least this often
PAY_EVERY = 1000  # owed steps answered together at most (~20 ms of them: then YIELD_S holds)


class Scheduler:
    """Runs a plan's steps in dependency order; ``outcomes`` fills as they finish."""

    def __init__(self, plan: Plan, jobs: int) -> None:
        self.plan = plan
        self.jobs = asyncio.Semaphore(max(1, jobs))
        self.outcomes: dict[str, StepOutcome] = {}
        self.cancel_requested = False

    async def run(
        self,
        run_step: Callable[[CompiledStep], Coroutine[Any, Any, StepOutcome]],
        *,
        stopped: Callable[[], bool],
        settle: Callable[[], None],
        now: Callable[[CompiledStep], StepOutcome | None] | None = None,
        only: frozenset[str] | None = None,
        owed: frozenset[str] = frozenset(),
        answer: Callable[[list[CompiledStep]], list[StepOutcome]] | None = None,
    ) -> None:
        """Run every step through ``run_step`` as soon as its dependencies are done, until
        ``stopped()`` (a run limit); ``settle()`` after each batch of finished steps (the
        recorder writes what it deferred). ``now(step)``, when given, answers a step without a
        task when it can (a cached step: no body to wait for), else None.

        A step is answered at once only while no task is running or was just started: then no
        other step could have run before it, and the answered steps finish in the batches the
        tasks would have finished in (each batch's dependents start in plan order).

        ``only``: start these steps and no others (an ancestor-closed set: what a first pass
        needs); the rest keep no outcome.

        ``owed``: steps ``now`` would answer at once whatever their dependencies' outcomes (a
        watch cycle's reused steps, every ancestor of each one reused too); ``answer(steps)``
        answers a run of them in one pass, in the order ``now`` would have been asked. They are
        answered before anything else is asked, started, settled or awaited, so every reader
        sees what one ``now`` a step writes (the same events and rows, in the same order).
        """
        plan = self.plan
        remaining = {sid: set(plan.steps[sid].deps) for sid in plan.order}
        dependents: dict[str, list[str]] = {sid: [] for sid in plan.order}
        for sid, deps in remaining.items():
            for d in deps:
                dependents[d].append(sid)
        running: dict[asyncio.Task[StepOutcome], str] = {}
        position = {sid: i for i, sid in enumerate(plan.order)}
        # Finished tasks arrive on a queue: asyncio.wait over every running task would hook and
        # unhook a callback on each of them per completion (quadratic in a wide fan-out).
        finished: asyncio.Queue[asyncio.Task[StepOutcome]] = asyncio.Queue()
        answered: list[str] = []  # steps answered without a task, not yet a finished batch
        started = False  # a task was started since the last batch
        yielded = time.monotonic()
        owing: list[str] = []  # owed steps taken as answered, their answers not yet made

        def pay() -> None:
            if owing:
                ids, owing[:] = list(owing), []
                assert answer is not None
                for sid, outcome in zip(ids, answer([plan.steps[s] for s in ids]), strict=True):
                    self.outcomes[sid] = outcome

        def launch(sid: str) -> None:
            nonlocal started
            if only is not None and sid not in only:
                return
            if now is not None and not running and not started:
                if sid in owed and answer is not None:
                    owing.append(sid)
                    answered.append(sid)
                    return
                pay()
                outcome = now(plan.steps[sid])
                if outcome is not None:
                    self.outcomes[sid] = outcome
                    answered.append(sid)
                    return
            pay()
            task = asyncio.create_task(run_step(plan.steps[sid]), name=sid)
            task.add_done_callback(finished.put_nowait)
            running[task] = sid
            started = True

        def finish(batch: list[str]) -> None:
            for sid in sorted(batch, key=position.__getitem__):
                for dep in dependents[sid]:
                    remaining[dep].discard(sid)
                    if not remaining[dep] and not stopped():
                        launch(dep)

        for sid in plan.order:
            if not remaining[sid]:
                launch(sid)
        try:
            while running or answered:
                if answered and not started:  # no task could have finished before them
                    batch, answered[:] = list(answered), []
                    if len(owing) >= PAY_EVERY:
                        pay()
                    if time.monotonic() - yielded > YIELD_S:  # a cancel, a limit, a commit
                        pay()
                        await asyncio.sleep(0)
                        yielded = time.monotonic()
                else:
                    pay()
                    if answered:  # beside tasks just started: the ones done at once join them
                        await asyncio.sleep(0)
                        await asyncio.sleep(0)
                        done = []
                    else:
                        done = [await finished.get()]
                    while not finished.empty():
                        done.append(finished.get_nowait())
                    batch, answered[:] = list(answered), []
                    for task in done:
                        sid = running.pop(task)
                        self.outcomes[sid] = task.result()
                        batch.append(sid)
                started = False
                finish(batch)
                if started:
                    await asyncio.sleep(0)  # the new steps start (a process spawned) first
                if not owing:  # (a run of owed answers settles once it is paid)
                    settle()
        finally:
            pay()  # the last steps owed (nothing is owed across an await)
            for task in running:
                task.cancel()
            if running:
                # Bounded: a step that swallows its cancel (third-party code) is left behind
                # rather than holding the run's end (and the journal's `cancelled`) forever.
                await asyncio.wait(running, timeout=STOP_GRACE_S)
                for task in running:
                    if task.done() and not task.cancelled():
                        task.exception()  # retrieved: the run is ending, its outcome is moot
            settle()

    async def watch_cancel(self, main: asyncio.Task[None], requested: Callable[[], bool]) -> None:
        """Poll ``requested()`` (a cancel asked from another process); cancel ``main`` when it
        says so."""
        while not main.done():
            await asyncio.sleep(CANCEL_POLL_S)
            if requested():
                self.cancel_requested = True
                main.cancel()
                return

    def slot(self) -> HeldSlot:
        """``async with``: hold one ``--jobs`` slot; a provider call gives it back while it
        waits (slots.py)."""
        return HeldSlot(self.jobs)

    def blocked(self, step: CompiledStep) -> str | None:
        """Why ``step`` must not run given its dependencies' outcomes, or None."""
        for d in step.deps:
            o = self.outcomes[d]
            if o.status is StepStatus.FAILED:
                return f"upstream '{d}' failed"
            if o.status is StepStatus.AWAITING_HUMAN:
                return f"waiting for the decision at '{d}'"
            if o.status is StepStatus.AWAITING_BATCH:
                return f"waiting for the batch of '{d}'"
            if o.status is StepStatus.REJECTED:
                return f"rejected at '{d}'"
            if o.status is StepStatus.SKIPPED and step.on_skipped != "run":
                return f"upstream '{d}' was skipped"
            if o.status is StepStatus.PARTIAL and (
                step.needs_complete or step.on_partial != "continue"
            ):
                return f"upstream '{d}' is partial"
        return None


class HeldSlot:
    """One execution's slot with its lending installed (a class: the generator-based context
    manager it was cost ~3 us of each for_each element's ~90)."""

    def __init__(self, jobs: asyncio.Semaphore) -> None:
        self._slot = CpuSlot(jobs)
        self._lending = LendSlots(self._slot.released)
        self._commands: Token[Callable[[], AbstractAsyncContextManager[None]] | None] | None = None

    async def __aenter__(self) -> None:
        await self._slot.__aenter__()
        self._lending.__enter__()
        self._commands = command_slot.set(self._slot.command)

    async def __aexit__(self, *exc: object) -> None:
        if self._commands is not None:
            command_slot.reset(self._commands)
            self._commands = None
        self._lending.__exit__()
        await self._slot.__aexit__()
