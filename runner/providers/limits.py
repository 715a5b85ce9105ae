"""What bounds a provider call: the provider's own limit across the run, never a CPU slot.

The engine lends each execution one of its ``--jobs`` slots for CPU work. Waiting on a provider is
not CPU work, so ``waiting()`` hands the slot back for as long as the call (and its backoff)
lasts; the engine installs how that is done with ``LendSlots``. What does bound the calls is the
step's ``concurrency`` (a for_each element holds its turn while its calls are out:
``calling()``) and ``ProviderGate``: one per provider instance, so a provider's
``max_concurrency`` holds across every step and element of a run. On Dask workers (a step type
that runs anywhere and calls a provider) each provider's gate is a ``ClusterGate`` instead: one
``distributed.Semaphore`` per provider name, so the cap holds across the whole cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar, Token
from typing import Any, Protocol, TypeAlias, TypeVar

from ..errors import ProviderError

T = TypeVar("T")

SlotRelease = Callable[[], AbstractAsyncContextManager[None]]

# Set by the engine for the duration of one execution; tasks the step starts inherit it.
_release: ContextVar[SlotRelease | None] = ContextVar("runner_slot_release", default=None)


class LendSlots:
    """``with LendSlots(release):`` within it, ``waiting()`` enters ``release()`` (the engine
    gives back a slot). A class: entered once for every execution."""

    def __init__(self, release: SlotRelease) -> None:
        self._release = release
        self._token: Token[SlotRelease | None] | None = None

    def __enter__(self) -> None:
        self._token = _release.set(self._release)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _release.reset(self._token)
            self._token = None


def waiting() -> AbstractAsyncContextManager[None]:
    """Enter around a wait on a provider: the caller's CPU slot is free meanwhile."""
    release = _release.get()
    return release() if release is not None else contextlib.nullcontext()


# Set by a for_each for each of its elements (engine/run/foreach.py); tasks it starts inherit it.
_turn: ContextVar[AbstractAsyncContextManager[None] | None] = ContextVar(
    "runner_element_turn", default=None
)


class HoldTurn:
    """``with HoldTurn(turn):`` within it, ``calling()`` is ``turn``: a for_each element's turn
    among its step's ``concurrency``, held while its provider calls are out."""

    def __init__(self, turn: AbstractAsyncContextManager[None]) -> None:
        self._turn = turn
        self._token: Token[AbstractAsyncContextManager[None] | None] | None = None

    def __enter__(self) -> None:
        self._token = _turn.set(self._turn)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _turn.reset(self._token)
            self._token = None


def calling() -> AbstractAsyncContextManager[None]:
    """Enter around one provider call, all its attempts: a for_each element holds its turn
    meanwhile (taking one again first if it gave it back), and gives it back when its last call
    out ends, so the next element's call goes out before this one records its reply."""
    turn = _turn.get()
    return turn if turn is not None else contextlib.nullcontext()


# Set (by the engine's ledger, engine/run/spend.py) when a call is journaled under a budget, in
# the call's own task: what the call awaits once it holds its provider's permit, before its
# request goes out (providers/spendguard.py).
_admission: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "runner_spend_admission", default=None
)


def expect_admission(admit: Callable[[], Awaitable[None]] | None) -> None:
    """The next call sent from this task awaits ``admit()`` first (None: no budget)."""
    _admission.set(admit)


async def admitted() -> None:
    """Await this task's pending admission, once (calls.with_provider_retries, inside the
    provider's gate, so a call counts as in flight only once it is out)."""
    admit = _admission.get()
    if admit is not None:
        _admission.set(None)  # a retry of the same call is admitted already
        await admit()


class ProviderGate:
    """At most ``limit`` calls in flight, over every event loop the provider is used from.

    A semaphore binds to the loop it first waits in; a provider object can outlive a loop (a
    watch session runs each apply in its own), so each loop gets its own semaphore.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sem: asyncio.Semaphore | None = None
        self.in_flight = 0
        self.waiting = 0  # calls waiting for a permit (the console counts them)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._sem is None or self._loop is not loop:
            self._loop, self._sem = loop, asyncio.Semaphore(self.limit)
        return self._sem

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._semaphore().acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1

    async def __aexit__(self, *exc: object) -> None:
        assert self._sem is not None
        self.in_flight -= 1
        self._sem.release()


# Set in a Dask worker (engine/run/executors.py): gates are made cluster-wide there.
_cluster_gates = False


def use_cluster_gates() -> None:
    """From now on, this process's providers bound their calls with ``ClusterGate``s."""
    global _cluster_gates
    _cluster_gates = True


class ClusterGate:
    """At most ``limit`` calls in flight over a whole Dask cluster: a ``distributed.Semaphore``
    named after the provider, so every worker's copy of the provider shares it. Every worker
    reads the same runner.toml, so they agree on the limit; the first to ask creates it.

    Its calls block (they go through the worker's client on the worker's own event loop), so
    they run in a thread: the body's loop goes on with its other calls meanwhile.
    """

    def __init__(self, provider: str, limit: int) -> None:
        self.limit = max(1, limit)
        self.name = f"runner-provider-{provider}"
        self.in_flight = 0
        self.waiting = 0  # this worker's calls waiting for a lease
        self._sem: Any = None

    def _semaphore(self) -> Any:
        if self._sem is None:
            from distributed import Semaphore

            self._sem = Semaphore(max_leases=self.limit, name=self.name)  # type: ignore[no-untyped-call]
        return self._sem

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            sem = await asyncio.to_thread(self._semaphore)
            await asyncio.to_thread(sem.acquire)
        finally:
            self.waiting -= 1
        self.in_flight += 1

    async def __aexit__(self, *exc: object) -> None:
        self.in_flight -= 1
        await asyncio.to_thread(self._semaphore().release)


Gate: TypeAlias = ProviderGate | ClusterGate


def make_gate(provider: str, limit: int) -> Gate:
    """The gate of provider ``provider`` (its configured name) allowing ``limit`` calls."""
    return ClusterGate(provider, limit) if _cluster_gates else ProviderGate(limit)


class CallRoute:
    """Where one attempt of a call went: set by a pooled provider while the attempt runs. (A
    plain class: a dataclass cost ~0.25 ms to make, at every start-up.)"""

    __slots__ = ("backend", "pinned", "refused")

    def __init__(self) -> None:
        self.backend: str | None = None  # the URL of the backend that took it
        self.pinned = False  # the call must go to that backend (a remote job lives there)
        self.refused = False  # that backend refused the connection: nothing was sent


_route: ContextVar[CallRoute | None] = ContextVar("runner_call_route", default=None)


def current_route() -> CallRoute | None:
    """The route of the attempt running in this task (None outside ``gated_call``)."""
    return _route.get()


class Gated(Protocol):
    """A provider, as far as its gate goes (base.Provider imports this module)."""

    @property
    def gate(self) -> Gate: ...


async def gated_call(provider: Gated, fn: Callable[[], Awaitable[T]]) -> T:
    """One attempt of ``fn()`` under the provider's gate.

    A refused connection sent nothing, so the call goes straight to another healthy backend of
    the pool instead of waiting out a retry's backoff; when none is left (or the call is pinned
    to the one that refused) it waits for that backend's next probe, as long as the pool's
    ``max_wait`` allows: a backend that is down costs time, not the call's attempts.
    """
    while True:
        route = CallRoute()
        token = _route.set(route)
        try:
            async with provider.gate:
                return await fn()
        except ProviderError:
            if not route.refused:
                raise
        finally:
            _route.reset(token)
