"""The event loop a run goes through, and ending it on SIGINT/SIGTERM within a bounded time.

The first signal cancels the main task: the interpreter journals the run cancelled and kills its
in-flight work (a step that does not stop within ``scheduler.STOP_GRACE_S`` is left behind).
Tasks still pending once the main task has ended get ``GRACE_S`` to stop, and threads blocked in
a call (``asyncio.to_thread``) are not waited for. Whatever is left (code that swallows a cancel,
a thread that never returns), a watchdog ends the process ``FORCE_S`` after the signal -- or at a
second signal -- with exit 130, after ``on_force`` (an apply journals its run cancelled there).
A signal never raises inside arbitrary code: asyncio.run's own SIGINT handling did that for the
second Ctrl-C, and runner's SIGTERM handler did it for the first, in the middle of a lock's
release or a journal write.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GRACE_S = 2.0  # leftover tasks, cancelled, have this long to stop
FORCE_S = 5.0  # after a signal the process ends within this, whatever still runs
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The cyclic collector's thresholds while a run lasts (see run_async).
RUN_GC_THRESHOLDS = (100_000, 50, 100)


class _Stopper:
    """The loop's SIGINT/SIGTERM handlers: cancel ``task``, then force the exit if need be."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], on_force: Callable[[], None]
    ) -> None:
        self.loop, self.task, self.on_force = loop, task, on_force
        self.signals = 0
        self.previous: dict[int, Any] = {}
        self.calm = threading.Event()  # set: the run ended and nothing holds the exit

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only; a loop elsewhere is its owner's to stop
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            try:
                self.loop.add_signal_handler(sig, self._signalled)
            except (ValueError, RuntimeError, NotImplementedError):
                continue
            self.previous[sig] = previous

    def uninstall(self) -> None:
        for sig, previous in self.previous.items():
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_signal_handler(sig)
                # remove_signal_handler leaves the default; the caller's own comes back
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)

    def _signalled(self) -> None:
        self.signals += 1
        if self.signals > 1:
            self.force("a second signal")
        self.task.cancel()
        watchdog = threading.Thread(target=self._watchdog, name="runner-stop", daemon=True)
        watchdog.start()

    def _watchdog(self) -> None:
        if not self.calm.wait(FORCE_S):
            self.force(f"still running {FORCE_S:g} s after the signal")

    def settle(self) -> None:
        """The loop has ended: the watchdog stands down unless a thread left behind (a call
        that never returned) would hold the process at its exit. A program that goes on after
        the cancel is then never ended by it."""
        me = threading.current_thread()
        others = [t for t in threading.enumerate() if t is not me and not t.daemon]
        for t in others:
            t.join(0.1)  # the default executor's idle threads leave at once
        if not any(t.is_alive() for t in others):
            self.calm.set()

    def force(self, why: str) -> None:
        with contextlib.suppress(Exception):  # the exit must happen whatever this meets
            self.on_force()
        with contextlib.suppress(OSError):
            os.write(2, f"cancelled ({why}: stopped without waiting for the rest)\n".encode())
        os._exit(130)


def run_async(coro: Coroutine[Any, Any, T], *, on_force: Callable[[], None] | None = None) -> T:
    """Run ``coro`` in a new event loop, as asyncio.run does, except that SIGINT and SIGTERM
    cancel it and the process ends within ``FORCE_S`` of the signal (see the module's doc).

    Raises KeyboardInterrupt when a signal cancelled it. Child processes are reaped through
    pidfds where Python 3.11 does not do so by default (its thread-per-child watcher costs
    ~1.5 ms a child); runner's own commands go through runner.expr.shellrun, this serves plugins.
    """
    pidfd = (
        sys.version_info < (3, 12)
        and hasattr(os, "pidfd_open")
        and threading.current_thread() is threading.main_thread()  # the watcher is global
    )
    # A run keeps its data (a for_each's elements, their outputs) alive until it ends, and the
    # cyclic collector's default 700-allocation threshold re-walks it over and over (~15% of a
    # 10,000-element for_each); the engine's own structures are acyclic, so collect rarely.
    thresholds = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stopper: _Stopper | None = None
    try:
        if pidfd:
            watcher = asyncio.PidfdChildWatcher()
            watcher.attach_loop(loop)
            asyncio.set_child_watcher(watcher)
        task = loop.create_task(coro)
        stopper = _Stopper(loop, task, on_force or (lambda: None))
        stopper.install()
        try:
            # The result is taken from the task here, not kept by a handler's repr (asyncio.run
            # resets SIGINT through signal.signal, which builds the repr of the old handler:
            # the main task and so a whole run's outputs, 1.5 s for a 3,000-element for_each).
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if stopper.signals:
                raise KeyboardInterrupt from None
            raise
    finally:
        signalled = stopper is not None and stopper.signals > 0
        try:
            _end_leftovers(loop, signalled)
        finally:
            if stopper is not None:
                stopper.uninstall()
                if signalled:
                    stopper.settle()
            if pidfd:
                # The watcher is process-global: leave the default for loops in other threads.
                asyncio.set_child_watcher(None)  # type: ignore[arg-type]  # None resets it
            asyncio.set_event_loop(None)
            loop.close()
            gc.set_threshold(*thresholds)


def _end_leftovers(loop: asyncio.AbstractEventLoop, signalled: bool) -> None:
    """Cancel the tasks still pending and give them ``GRACE_S``; end async generators; let the
    default executor's threads go (waited for only when no signal asked the run to end)."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=GRACE_S))
        for t in pending:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: a failure while stopping is not worth a warning
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), GRACE_S))
    executor = getattr(loop, "_default_executor", None)
    if executor is None:
        return
    if signalled:
        executor.shutdown(wait=False, cancel_futures=True)
    else:
        loop.run_until_complete(loop.shutdown_default_executor())


async def bounded(coro: Coroutine[Any, Any, Any], seconds: float = GRACE_S) -> None:
    """Await ``coro`` (a clean-up) for at most ``seconds``; past that it is left to finish or
    not on its own: a run that is ending does not wait on a connection that will not close."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        task.result()
    else:
        task.cancel()
