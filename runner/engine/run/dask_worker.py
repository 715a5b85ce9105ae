"""The worker's side of ``--executor dask``: a step body as plain data (``Job``), and running a
batch of them in a worker thread (``run_batch``). Imported on workers by reference (pickle), and
by the coordinator to build jobs.

A worker rebuilds what a body may use from the job: the project root, the shared object store,
its log and feedback; and, for a step type that calls a provider from a worker, the project's
providers (the same runner.toml, read on the worker) whose concurrency caps hold cluster-wide
(one ``distributed.Semaphore`` per provider: providers/limits.py) and the idempotency ledger in
the shared journal, so a call recorded by one worker is never paid again by another.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...steps.base import StepContext, StepResult, StepType


@dataclass(frozen=True)
class Job:
    """One step body as plain data (pickled to a worker)."""

    uses: str
    args: dict[str, Any]
    root: str
    state_dir: str
    run_id: str
    step_id: str
    element: int | None
    attempt: int
    feedback: list[str] = field(default_factory=list)
    check_round: int = 0
    review: list[str] = field(default_factory=list)
    # "module:Class" of the step type the coordinator used: a type that is neither built in nor
    # an entry point (an embedding program's own) loads on the worker from there.
    type_path: str | None = None
    retry_uncertain: bool = False
    once: str | None = None  # a step not safe to repeat: its mark (engine/run/once.py)
    ticket: str | None = None  # and the one start this dispatch may make (once.issue)
    sandbox: bool = True  # its commands confined (runner/expr/confined.py)
    network: bool = False


def job_for(step_type: StepType, ctx: StepContext, args: dict[str, Any]) -> Job:
    cls = type(step_type)
    return Job(
        uses=step_type.name,
        args=args,
        root=str(ctx.env.root),
        state_dir=str(ctx.env.state_dir),
        run_id=ctx.run_id,
        step_id=ctx.step_id,
        element=ctx.element,
        attempt=ctx.attempt,
        feedback=list(ctx.feedback),
        check_round=ctx.check_round,
        review=list(ctx.review),
        type_path=f"{cls.__module__}:{cls.__qualname__}",
        retry_uncertain=ctx.env.retry_uncertain,
        once=ctx.once,
        ticket=_ticket(ctx.once),
        sandbox=ctx.sandbox,
        network=ctx.network,
    )


def _ticket(mark: str | None) -> str | None:
    if mark is None:
        return None
    from .once import issue

    return issue(mark)


_local = threading.local()


def _worker_loop() -> asyncio.AbstractEventLoop:
    """One event loop per worker thread, kept: making one costs ~1-8 ms (a selector and a
    socket pair), more than a small step body."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
    return loop


@functools.cache
def _step_type(name: str, type_path: str | None) -> StepType | None:
    from ...steps.registry import default_registry

    found = default_registry().get(name)
    if found is None and type_path:
        module, _, qualname = type_path.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        found = obj() if isinstance(obj, type) and issubclass(obj, StepType) else None
    return found


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


class _WorkerProviders:
    """The project's providers for one worker thread, configured on first use (most bodies
    never call one). Per thread: a provider keeps HTTP clients bound to the thread's loop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._access: Any = None

    def _get(self) -> Any:
        if self._access is None:
            from ...providers.config import load_access
            from ...providers.limits import use_cluster_gates

            use_cluster_gates()
            self._access = load_access(self.root, keep_clients=True)
        return self._access

    def get(self, name: str | None) -> Any:
        return self._get().get(name)

    def default_name(self) -> str:
        return str(self._get().default_name())


def _thread_state(job: Job) -> tuple[Any, Any]:
    """This thread's (providers, journal) for the job's project, kept between bodies."""
    key = (job.root, job.state_dir)
    kept: dict[tuple[str, str], tuple[Any, Any]] = getattr(_local, "projects", None) or {}
    _local.projects = kept
    if key not in kept:
        kept[key] = (_WorkerProviders(Path(job.root)), _LazyJournal(Path(job.state_dir)))
    return kept[key]


class _LazyJournal:
    """The shared journal, opened by a worker only for a body that keeps a call ledger."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._journal: Any = None

    def get(self) -> Any:
        if self._journal is None:
            from ...state.journal import Journal

            self._journal = Journal.open(self.state_dir)
        return self._journal


class _WorkerLedger:
    """The idempotency ledger on a worker: the coordinator's JournalLedger over the shared
    journal, opened at the first call (so bodies that call no provider never open it)."""

    def __init__(self, journal: _LazyJournal, run_id: str, step_id: str) -> None:
        self._journal, self.run_id, self.step_id = journal, run_id, step_id
        self._ledger: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._ledger is None:
            from .recorder import JournalLedger

            self._ledger = JournalLedger(self._journal.get(), self.run_id, self.step_id)
        return getattr(self._ledger, name)


def _run_body(job: Job) -> tuple[StepResult, list[str]]:
    from ...state.objects import ObjectStore
    from ...steps.base import StepEnv

    step_type = _step_type(job.uses, job.type_path)
    if step_type is None:
        raise UsageError(f"step type '{job.uses}' is not installed on this worker")
    lines: list[str] = []
    root, state = Path(job.root), Path(job.state_dir)
    providers, journal = _thread_state(job)
    env = StepEnv(
        root=root,
        state_dir=state,
        objects=ObjectStore(state / "objects"),
        providers=providers,
        retry_uncertain=job.retry_uncertain,
    )
    ctx = StepContext(
        env=env,
        run_id=job.run_id,
        step_id=job.step_id,
        element=job.element,
        attempt=job.attempt,
        feedback=list(job.feedback),
        check_round=job.check_round,
        review=list(job.review),
        ledger=_WorkerLedger(journal, job.run_id, job.step_id),
        log=lines.append,
        sandbox=job.sandbox,
        network=job.network,
    )
    if job.once is not None:  # Dask may run a lost worker's batch again: not this body
        from .once import claim

        claim(job.once, job.run_id, job.step_id, job.element, job.ticket)
    result = _worker_loop().run_until_complete(step_type.run(ctx, dict(job.args)))
    return result, lines


# One body's outcome in a batch: (result or the exception it raised, log lines, seconds).
Outcome = tuple[StepResult | BaseException, list[str], float]


def run_batch(jobs: list[Job]) -> tuple[str, list[Outcome]]:
    """Run a batch of bodies one after another in this worker thread: (worker address, one
    outcome per job). A body's failure is its own outcome, not the batch's."""
    out: list[Outcome] = []
    for job in jobs:
        t0 = time.perf_counter()
        try:
            result, lines = _run_body(job)
            out.append((result, lines, time.perf_counter() - t0))
        except Exception as exc:  # handed back to the coordinator, which judges it
            out.append((exc, [], time.perf_counter() - t0))
    return _worker_address(), out
