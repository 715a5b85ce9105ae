"""Where a step body runs: in this process (local) or on a Dask cluster (``--executor dask``).

The coordinator (the interpreter) keeps the DAG, keys, journal, gates and the provider ledger;
an executor only runs one step body from plain data -- the step type's name, its resolved
arguments, the project root, the state directory (whose object store the workers share) and the
attempt's feedback -- and hands back the step's StepResult, its log lines and where it ran. A
step body never reaches the journal or the scheduler.

Step types declare ``runs_anywhere`` (steps/base.py): shell, finalize, card, hash, template and
read do; provider calls and gates stay in the coordinator's event loop unless a type that calls
a provider opts in (then its caps hold cluster-wide: dask_worker.py). A step may ask for
worker resources (``resources: {GPU: 1}``), passed to Dask, which places the task only on a
worker that declares them, never more at once than declared.

Faults: a worker that dies mid-step is Dask's to handle: the scheduler gives the task to another
worker (up to its ``allowed-failures``, 3 by default); runner adds no retry of its own for that,
so a body runs again elsewhere at most that often -- except one of a step declared
``repeat_safe: false``, which marks that it began and refuses to begin again (once.py). A body
writes objects atomically and durably (temp file, fsync, rename) before its result is returned,
so a half-written object is never recorded. The journal lives with the coordinator: a
coordinator killed with -9 resumes on the next apply exactly as the local executor does.

dask is imported only when a Dask executor is opened (the ``runner-pipelines[dask]`` extra).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import StepFailure, UsageError
from ...source import secretmask
from ...steps.base import StepContext, StepResult, StepType

if TYPE_CHECKING:  # the worker's side loads with the Dask executor, not with every apply
    from .dask_worker import Job


class BodyLost(StepFailure):
    """The executor lost a body's task (its workers died, the scheduler went away): whether
    the body began, or took effect, is unknown -- as a paid call whose reply was lost."""

    def __init__(self, reason: str) -> None:
        # Worth another attempt for a body safe to repeat; one that is not is refused by its
        # mark, which stays (engine/run/once.py).
        super().__init__(f"the body's outcome was lost: {reason}", retryable=True)


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


async def local_cluster(workers: int, threads: int) -> Any:
    """An asynchronous LocalCluster of ``workers`` processes with ``threads`` threads each
    (no dashboard: nobody looks at it, and it costs start-up time)."""
    import dask
    from distributed import LocalCluster

    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in each worker to hand memory back to the
    # system sooner: every image a finalize body decodes and frees is then returned and faulted
    # in again, which nearly doubled a finalize body's CPU (77-83 ms against 44-53 ms per image
    # unset, bench_dask.py --finalize). Bodies are short and allocate alike, so glibc's own
    # threshold is the better one. A nanny reads this when it is made: respawned workers too.
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        return await LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers,
            threads_per_worker=threads,
            processes=True,
            asynchronous=True,
            # The scheduler serves HTTP (/metrics) even without a dashboard, on 8787 unless
            # told: a free port, so a busy 8787 (another cluster) costs no warning.
            dashboard_address="127.0.0.1:0",
            # Secrets are wiped from the environment workers inherit (runner/source/secretmask.py):
            # a worker sets them in its own, after start, for a body's pass_env.
            env=secretmask.held_environ(),
        )


class _Batch:
    """Step bodies sent to the cluster together, and the future running them. (Plain classes,
    this and _Pending: as dataclasses they cost ~0.5 ms of every start-up.)"""

    __slots__ = ("future", "members")

    def __init__(self, members: list[_Pending]) -> None:
        self.members = members
        self.future: Any = None  # the Dask future running it

    def abandon_if_unwanted(self) -> None:
        """Cancel the Dask task once every body in it was given up (timeouts, cancellation)."""
        if self.future is not None and all(p.future.done() for p in self.members):
            self.future.cancel()


class _Pending:
    """A step body waiting for its result from the cluster."""

    __slots__ = ("batch", "future", "job", "resources")

    def __init__(
        self,
        job: Job,
        resources: tuple[tuple[str, float], ...],
        future: asyncio.Future[tuple[StepResult, list[str], str]],
    ) -> None:
        self.job = job
        self.resources = resources
        self.future = future
        self.batch: _Batch | None = None


# A batch aims at about this much work (once a type's body time is known): long enough to
# carry the scheduler's round trip (a few ms, tens on a busy machine), short enough that a
# dependent step does not wait long for its input.
BATCH_SECONDS = 0.05
MAX_BATCH = 64
GATHER_SECONDS = 0.002  # bodies asked for within this window go out together


class DaskExecutor:
    """Bodies of ``runs_anywhere`` types run on a Dask cluster; others stay local.

    A Dask task costs about the same whatever it runs (a graph update, scheduler transitions,
    fetching the result: 5-20 ms of coordinator and scheduler time on a busy 2-core machine; the
    scheduler of a LocalCluster shares the coordinator's event loop), so bodies travel in
    batches (``run_batch``: one after another in one worker thread). At most two batches per
    worker thread are out at once; what is asked for meanwhile waits and leaves with the next
    batch that comes back, so the batch size follows the load by itself: 2,000 hashes leave
    in batches of ~10-60, a ``sleep 10`` alone once its time is known. A batch is cut at
    ``BATCH_SECONDS`` of known body time (a moving mean per step type; unknown at first, then
    the queue is spread evenly over the free room). A dependent step waits for its input's
    whole batch: at most ~``BATCH_SECONDS`` once times are known. A worker that dies takes its
    batch with it: Dask runs the whole batch again elsewhere (bodies are idempotent).
    """

    name = "dask"

    def __init__(self, client: Any, cluster: Any = None) -> None:
        self.client = client
        self.cluster = cluster
        self.where: dict[tuple[str, int | None], str] = {}  # (step, element) -> worker address
        self.threads = 1  # the cluster's worker threads, read by slots()
        self._queue: list[_Pending] = []
        self._flush_at: asyncio.TimerHandle | None = None
        self._seconds: dict[str, float] = {}  # step type -> a body's recent time (moving mean)
        self._deliveries: set[asyncio.Task[None]] = set()
        self._out = 0  # batches sent and not back yet
        self.tasks = 0  # Dask tasks submitted (bench_dask prints bodies per task)

    @classmethod
    async def open(
        cls, scheduler: str | None, workers: int | None, threads: int | None = None
    ) -> DaskExecutor:
        """Connect to ``scheduler`` (tcp://HOST:8786) or start an in-process LocalCluster of
        ``workers`` worker processes with ``threads`` threads each. Raises UsageError when dask
        is not installed."""
        try:
            from distributed import Client
        except ImportError:
            raise UsageError(
                "--executor dask needs dask's distributed scheduler",
                hint="pip install 'runner-pipelines[dask]'",
            ) from None
        cluster = None
        if scheduler:
            client = await Client(scheduler, asynchronous=True)  # type: ignore[no-untyped-call]
            await client.wait_for_workers(1)
        else:
            cluster = await local_cluster(workers or 2, threads or 1)
            client = await Client(cluster, asynchronous=True)  # type: ignore[no-untyped-call]
            await client.wait_for_workers(workers or 2)
        return cls(client, cluster)

    async def slots(self) -> int:
        """How many bodies to keep asked for: 32 per worker thread (64 at least). Dask queues
        what no thread can take yet; more than the threads hides the round trip to the
        scheduler behind others' work and fills batches (see the class)."""
        info = await self.client.scheduler.identity()
        self.threads = max(
            1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        )
        return max(64, 32 * self.threads)

    async def run(
        self, step_type: StepType, ctx: StepContext, args: dict[str, Any], *, resources: Any
    ) -> StepResult:
        if not step_type.runs_anywhere:
            return await step_type.run(ctx, args)
        from .dask_worker import job_for

        job = job_for(step_type, ctx, args)
        loop = asyncio.get_running_loop()
        pending = _Pending(
            job,
            tuple(sorted((str(k), float(v)) for k, v in dict(resources or {}).items())),
            loop.create_future(),
        )
        self._queue.append(pending)
        if self._flush_at is None:
            self._flush_at = loop.call_later(GATHER_SECONDS, self._flush)
        try:
            result, lines, where = await pending.future
        except asyncio.CancelledError:
            pending.future.cancel()
            if pending.batch is not None:
                pending.batch.abandon_if_unwanted()
            raise
        for line in lines:
            ctx.log(line)
        self.where[(ctx.step_id, ctx.element)] = where
        return result

    # -- batching ------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send what is asked for, as long as fewer than ``_cap`` batches are out; the rest
        waits for the next batch to come back (and so travels with what gathers meanwhile)."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        try:
            self._send()
        except Exception as exc:  # e.g. the client lost its scheduler: fail, never hang
            queue, self._queue = self._queue, []
            for p in queue:
                if not p.future.done():
                    p.future.set_exception(exc)

    def _send(self) -> None:
        queue = [p for p in self._queue if not p.future.done()]
        room = self._cap() - self._out
        if not queue or room <= 0:
            self._queue = queue
            return
        batches = self._batches(queue, room)
        sent = {id(p) for b in batches for p in b.members}
        self._queue = [p for p in queue if id(p) not in sent]
        groups: dict[tuple[tuple[str, float], ...], list[_Batch]] = {}
        for batch in batches:
            groups.setdefault(batch.members[0].resources, []).append(batch)
        from .dask_worker import run_batch

        for resources, same in groups.items():
            futures = self.client.map(
                run_batch,
                [[p.job for p in b.members] for b in same],
                key=[f"runner-{os.urandom(16).hex()}" for _ in same],
                pure=False,
                resources=dict(resources) or None,
            )
            self.tasks += len(same)
            self._out += len(same)
            for batch, future in zip(same, futures, strict=True):
                batch.future = future
                for p in batch.members:
                    p.batch = batch
                task = asyncio.ensure_future(self._deliver(batch))
                self._deliveries.add(task)
                task.add_done_callback(self._deliveries.discard)

    def _cap(self) -> int:
        """Batches out at once: two per worker thread (one running, one waiting there)."""
        return 2 * self.threads

    def _batches(self, queue: list[_Pending], room: int) -> list[_Batch]:
        """At most ``room`` batches from the front of ``queue``: the queue spread evenly over
        them, each cut at ``BATCH_SECONDS`` of known work or ``MAX_BATCH`` bodies."""
        spread = min(MAX_BATCH, max(1, -(-len(queue) // room)))
        out: list[_Batch] = []
        current: list[_Pending] = []
        work = 0.0
        for p in queue:
            if current and (
                p.resources != current[0].resources
                or len(current) >= spread
                or work >= BATCH_SECONDS
            ):
                out.append(_Batch(current))
                current, work = [], 0.0
                if len(out) == room:
                    return out
            current.append(p)
            work += self._seconds.get(p.job.uses, 0.0)
        out.append(_Batch(current))
        return out

    async def _deliver(self, batch: _Batch) -> None:
        try:
            where, outcomes = await batch.future
        except asyncio.CancelledError:
            self._out -= 1
            for p in batch.members:
                if not p.future.done():
                    p.future.cancel()
            return
        except Exception as exc:  # the task itself failed (e.g. its workers kept dying)
            self._done_one()
            lost = BodyLost(f"its Dask task failed ({type(exc).__name__}: {exc})")
            for p in batch.members:
                if not p.future.done():
                    p.future.set_exception(lost)
            return
        finally:
            self._release(batch)
        self._done_one()
        for p, (value, lines, seconds) in zip(batch.members, outcomes, strict=True):
            known = self._seconds.get(p.job.uses)
            self._seconds[p.job.uses] = seconds if known is None else 0.8 * known + 0.2 * seconds
            if p.future.done():
                continue
            if isinstance(value, BaseException):
                p.future.set_exception(value)
            else:
                p.future.set_result((value, lines, where))

    @staticmethod
    def _release(batch: _Batch) -> None:
        """Tell the scheduler the task's result is no longer wanted, now that it is here. A
        result still wanted lives in its worker's memory, and when that worker dies Dask runs
        the task again to make it anew: every body of a batch already delivered would start a
        second time (40 of 120 `repeat_safe: false` bodies did, one worker killed). Released
        at once, not when the Future is collected: a batch and its members refer to each other,
        so that waits for Python's cycle collector."""
        future, batch.future = batch.future, None
        if future is not None:
            future.release()

    def _done_one(self) -> None:
        self._out -= 1
        self._flush()  # what gathered while every batch was out goes now

    async def close(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
        for task in list(self._deliveries):
            task.cancel()
        await self.client.close()
        if self.cluster is not None:
            await self.cluster.close()
