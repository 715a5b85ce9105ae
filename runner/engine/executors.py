"""Where a step body runs: in this process (local) or on a Dask cluster (``--executor dask``).

The coordinator (the interpreter) keeps the DAG, keys, journal, gates and the provider ledger;
an executor only runs one step body from plain data -- the step type's name, its resolved
arguments, the project root, the state directory (whose object store the workers share) and the
attempt's feedback -- and hands back the step's StepResult, its log lines and where it ran. A
step body never reaches the journal or the scheduler.

Step types declare ``runs_anywhere`` (steps/base.py): shell, finalize, card, hash, template and
read do; provider calls and gates stay in the coordinator's event loop. A step may ask for
worker resources (``resources: {GPU: 1}``), passed to Dask, which places the task only on a
worker that declares them, never more at once than declared.

Faults: a worker that dies mid-step is Dask's to handle: the scheduler gives the task to another
worker (up to its ``allowed-failures``, 3 by default); runner adds no retry of its own for that,
so a body runs again elsewhere at most that often. A body writes objects atomically and durably
(temp file, fsync, rename) before its result is returned, so a half-written object is never
recorded. The journal lives with the coordinator: a coordinator killed with -9 resumes on the
next apply exactly as the local executor does.

dask is imported only when a Dask executor is opened (the ``runner[dask]`` extra).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import UsageError
from ..steps.base import StepContext, StepResult, StepType


class Executor(Protocol):
    name: str

    async def run(
        self, step_type: StepType, ctx: StepContext, args: dict[str, Any], *, resources: Any
    ) -> StepResult: ...

    async def close(self) -> None: ...


class LocalExecutor:
    """Today's behaviour: the body runs in the coordinator's event loop."""

    name = "local"

    async def run(
        self, step_type: StepType, ctx: StepContext, args: dict[str, Any], *, resources: Any
    ) -> StepResult:
        return await step_type.run(ctx, args)

    async def close(self) -> None:
        pass


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
def _step_type(name: str) -> StepType | None:
    from ..steps.registry import default_registry

    return default_registry().get(name)


def run_job(job: Job) -> tuple[StepResult, list[str], str]:
    """Run one step body on a worker: (result, log lines, the worker's address)."""
    from ..steps.base import StepEnv
    from ..store.objects import ObjectStore

    step_type = _step_type(job.uses)
    if step_type is None:
        raise UsageError(f"step type '{job.uses}' is not installed on this worker")
    lines: list[str] = []
    root, state = Path(job.root), Path(job.state_dir)
    env = StepEnv(root=root, state_dir=state, objects=ObjectStore(state / "objects"))
    ctx = StepContext(
        env=env,
        run_id=job.run_id,
        step_id=job.step_id,
        element=job.element,
        attempt=job.attempt,
        feedback=list(job.feedback),
        log=lines.append,
    )
    result = _worker_loop().run_until_complete(step_type.run(ctx, dict(job.args)))
    try:
        from distributed import get_worker

        where = str(get_worker().address)
    except (ImportError, ValueError):
        where = "local"
    return result, lines, where


class DaskExecutor:
    """Bodies of ``runs_anywhere`` types run on a Dask cluster; others stay local."""

    name = "dask"

    def __init__(self, client: Any, cluster: Any = None) -> None:
        self.client = client
        self.cluster = cluster
        self.where: dict[tuple[str, int | None], str] = {}  # (step, element) -> worker address

    @classmethod
    async def open(cls, scheduler: str | None, workers: int | None) -> DaskExecutor:
        """Connect to ``scheduler`` (tcp://HOST:8786) or start an in-process LocalCluster of
        ``workers`` worker processes. Raises UsageError when dask is not installed."""
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise UsageError(
                "--executor dask needs dask's distributed scheduler",
                hint="pip install 'runner[dask]'",
            ) from None
        cluster = None
        if scheduler:
            client = await Client(scheduler, asynchronous=True)  # type: ignore[no-untyped-call]
            await client.wait_for_workers(1)
        else:
            cluster = await LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers or 2,
                threads_per_worker=1,
                processes=True,
                asynchronous=True,
                dashboard_address=None,
            )
            client = await Client(cluster, asynchronous=True)  # type: ignore[no-untyped-call]
            await client.wait_for_workers(workers or 2)
        return cls(client, cluster)

    async def slots(self) -> int:
        """How many bodies to keep in flight: 8 per worker thread. Dask queues what no thread
        can take yet, so more than the threads hides each task's round trip to the scheduler
        (tens of ms on a busy machine) behind others' work."""
        info = await self.client.scheduler.identity()
        threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        return max(8, 8 * threads)

    async def run(
        self, step_type: StepType, ctx: StepContext, args: dict[str, Any], *, resources: Any
    ) -> StepResult:
        if not step_type.runs_anywhere:
            return await step_type.run(ctx, args)
        job = Job(
            uses=step_type.name,
            args=args,
            root=str(ctx.env.root),
            state_dir=str(ctx.env.state_dir),
            run_id=ctx.run_id,
            step_id=ctx.step_id,
            element=ctx.element,
            attempt=ctx.attempt,
            feedback=list(ctx.feedback),
        )
        future = self.client.submit(
            run_job,
            job,
            key=f"{ctx.step_id}-{ctx.element}-{uuid.uuid4().hex[:8]}",
            pure=False,
            resources=dict(resources) if resources else None,
        )
        try:
            result, lines, where = await future
        except asyncio.CancelledError:
            future.cancel()
            raise
        for line in lines:
            ctx.log(line)
        self.where[(ctx.step_id, ctx.element)] = where
        return result  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.client.close()
        if self.cluster is not None:
            await self.cluster.close()
