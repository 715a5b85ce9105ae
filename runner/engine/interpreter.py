"""The journaling interpreter: runs a compiled Plan, converging on what is missing or stale.

Ready steps run concurrently up to ``jobs``. A step whose key matches a completed execution with
its objects present is not run (``cached``); a deleted output file is restored from the store.
Step failures are recorded values: they stop the failing step's dependents and let independent
branches finish.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
import random
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import expr as ex
from .. import overrides
from ..canonical import CanonicalError
from ..canonical import digest as canonical_digest
from ..errors import (
    DiskFull,
    ExpressionError,
    InvalidPipeline,
    ProviderError,
    RunnerError,
    StepFailure,
    StoreError,
)
from ..pipeline import paths
from ..pipeline.compiler import CachePolicy, CompiledStep, Plan
from ..providers.limits import lend_slots
from ..steps.base import ProviderAccess, ResultStatus, StepContext, StepEnv, StepResult
from ..store.journal import CachedResult, Journal, dumps
from ..store.objects import ObjectStore
from . import gates
from .events import Event, EventType, NullReporter, Reporter
from .executors import Executor
from .files import FileHasher
from .keys import KeyParts
from .remote_link import RemoteLink
from .slots import CpuSlot

CANCEL_POLL_S = 0.2  # how often a run looks for `runner runs cancel` from another process
REJECTED_EXIT = 8  # a reviewer rejected the run: not an error, but nothing was committed


class StepStatus(enum.Enum):
    RAN = "ran"
    CACHED = "cached"
    SKIPPED = "skipped"
    FAILED = "failed"
    PARTIAL = "partial"
    AWAITING_HUMAN = "awaiting_human"
    REJECTED = "rejected"  # a human_gate's decision: nothing downstream of it runs

    @property
    def succeeded(self) -> bool:
        return self in (StepStatus.RAN, StepStatus.CACHED)


class RunStatus(enum.Enum):
    RUNNING = "running"
    AWAITING_HUMAN = "awaiting_human"
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


@dataclass
class ElementOutcome:
    index: int
    status: StepStatus
    key: str | None = None
    output: Any = None
    reason: str | None = None
    check_failure: bool = False
    duration_s: float = 0.0


@dataclass
class StepOutcome:
    id: str
    status: StepStatus
    key: str | None = None
    output: Any = None
    reason: str | None = None
    duration_s: float = 0.0
    attempts: int = 0
    check_failure: bool = False
    elements: list[ElementOutcome] | None = None
    report: Any = None
    # Files (relative to the root) the step's key covered: watch re-runs a step when one changes.
    reads: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "key": self.key,
            "duration_s": round(self.duration_s, 6),
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.elements is not None:
            counts: dict[str, int] = {}
            for e in self.elements:
                counts[e.status.value] = counts.get(e.status.value, 0) + 1
            doc["elements"] = {"total": len(self.elements), **counts}
        if self.report is not None:
            doc["report"] = self.report
        return doc


@dataclass
class ApplyOptions:
    jobs: int = field(default_factory=lambda: os.cpu_count() or 2)
    force: frozenset[str] = frozenset()
    dry_run: bool = False
    item: str | None = None
    kind: str = "run"
    parent_run_id: str | None = None
    reference_asset: str | None = None
    run_id: str | None = None
    resume_run_id: str | None = None
    wall_clock: float | None = None
    max_steps: int | None = None
    token_budget: int | None = None
    retry_uncertain: bool = False  # send again calls whose reply was lost (may pay twice)
    # A remote cache URL (`--remote`; else [cache] remote in runner.toml). remote_only: take
    # what the remote has and run nothing else (`runner cache pull`).
    remote: str | None = None
    remote_only: bool = False
    # Where step bodies run: "local", or "dask" (a LocalCluster of `workers` processes, or the
    # cluster at `scheduler`). jobs_given: --jobs was set (else dask uses the cluster's threads).
    executor: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    jobs_given: bool = False
    # Outcomes known to hold (watch: steps no changed file reaches), used without resolving.
    reuse: dict[str, StepOutcome] = field(default_factory=dict)


@dataclass
class RunReport:
    run_id: str
    pipeline: str
    status: RunStatus
    item: str | None
    steps: list[StepOutcome]
    exit_code: int
    reason: str | None = None
    # What this run depended on, for the no-op fast path (engine/fastpath.py): input files with
    # their stat signatures, workspace files that must exist, objects that must be present.
    inputs: dict[str, tuple[int, int, int, str]] = field(default_factory=dict)
    workspace: dict[str, str] = field(default_factory=dict)
    objects: set[str] = field(default_factory=set)
    remote: dict[str, Any] | None = None  # the remote cache's hits, pushes and requests

    def summary(self) -> dict[str, int]:
        s = {"ran": 0, "cached": 0, "skipped": 0, "failed": 0}
        for o in self.steps:
            if o.status.value in s:
                s[o.status.value] += 1
            elif o.status is StepStatus.PARTIAL:
                s["failed"] += 0
        return s

    def to_json(self) -> dict[str, Any]:
        return {
            "run": {
                "id": self.run_id,
                "pipeline": self.pipeline,
                "status": self.status.value,
                "item": self.item,
                **({"reason": self.reason} if self.reason else {}),
            },
            "summary": self.summary(),
            "steps": [o.to_json() for o in self.steps],
            **({"remote": self.remote} if self.remote is not None else {}),
            "exit_code": self.exit_code,
        }


class _Abort(Exception):
    """A run limit was hit."""


class JournalLedger:
    """The idempotency ledger a step sees, backed by the journal's calls table."""

    def __init__(self, journal: Journal, run_id: str, step_id: str) -> None:
        self.journal, self.run_id, self.step_id = journal, run_id, step_id

    def completed(self, key: str) -> dict[str, Any] | None:
        row = self.journal.call(key)
        if row and row["status"] == "completed":
            from ..store.journal import loads

            result: dict[str, Any] = loads(row["result"]) or {}
            return result
        return None

    def record(self, key: str) -> dict[str, Any] | None:
        return self.journal.call(key)

    def begin(self, key: str, meta: Mapping[str, Any]) -> None:
        self.journal.begin_call(key, self.run_id, self.step_id, meta)

    def sent(self, key: str) -> None:
        self.journal.call_sent(key)

    def remote_id(self, key: str, remote_id: str) -> None:
        self.journal.call_remote_id(key, remote_id)

    def complete(self, key: str, result: Mapping[str, Any]) -> None:
        self.journal.complete_call(key, result)

    def fail(self, key: str, error: str, status: str = "failed") -> None:
        self.journal.fail_call(key, error, status)

    def remote_job(self, key: str) -> dict[str, Any] | None:
        return self.journal.call_job(key)

    def note_remote_job(self, key: str, job: Mapping[str, Any] | None) -> None:
        self.journal.note_call_job(key, job)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class Interpreter:
    """Runs one plan against one state directory. Use ``await Interpreter(...).apply()``."""

    def __init__(
        self,
        plan: Plan,
        *,
        journal: Journal,
        objects: ObjectStore,
        state_dir: Path,
        options: ApplyOptions | None = None,
        reporter: Reporter | None = None,
        providers: ProviderAccess | None = None,
    ) -> None:
        self.plan = plan
        self.journal = journal
        self.objects = objects
        self.state_dir = state_dir
        self.options = options or ApplyOptions()
        self.reporter = reporter or NullReporter()
        self.env = StepEnv(
            root=plan.root,
            state_dir=state_dir,
            objects=objects,
            providers=providers,
            pipeline_file=plan.file,
            retry_uncertain=self.options.retry_uncertain,
        )
        self.run_id = self.options.resume_run_id or self.options.run_id or new_run_id()
        self.hasher = FileHasher(journal)
        self.outcomes: dict[str, StepOutcome] = {}
        self.context_steps: dict[str, dict[str, Any]] = {}
        self.jobs = asyncio.Semaphore(max(1, self.options.jobs))
        self.executions_started = 0
        self.tokens_used = 0
        self.abort_reason: str | None = None
        self.cached: dict[tuple[str, str], CachedResult] = {}
        self._pending_events: list[tuple[str, float, str, str | None, int | None, str]] = []
        self.current_phase: str | None = None
        self.reviews: dict[str, dict[str, Any]] = {}  # revise target step -> review context
        self.cancel_requested = False
        self.finished: dict[str, StepStatus] = {}  # step id -> status, for phase progress
        self._progress: dict[str, dict[str, int]] | None = None
        self.workspace_used: dict[str, str] = {}
        self._reads: dict[str, set[str]] = {}
        self._contract_of: dict[tuple[str, int], str | None] = {}
        self.edited_steps: set[str] = set()
        self.objects_used: set[str] = set()
        self._progress_written = 0.0
        # Journal writes of finished plain steps, done once their dependents have started
        # (see _run_all): the records are not on the path from one process to the next.
        self._deferred: list[Callable[[], None]] = []
        self.remote: RemoteLink | None = None  # set by apply when a remote cache is configured
        self.executor: Executor | None = None  # set by apply for --executor dask (else local)

    # -- events --------------------------------------------------------------------------------

    def emit(
        self, type_: EventType, step: str | None = None, element: int | None = None, **data: Any
    ) -> None:
        ev = Event(type_, self.run_id, step, element, data)
        self.reporter.event(ev)
        if type_ is not EventType.LOG:
            self._pending_events.append(
                (self.run_id, ev.ts, type_.value, step, element, dumps(data))
            )

    def emit_warning(self, message: str) -> None:
        """A warning for the user (consoles show it; the run goes on)."""
        self.emit(EventType.LOG, None, None, level="warning", line=message)

    def _flush_deferred(self) -> None:
        while self._deferred:
            batch, self._deferred = self._deferred, []
            for write in batch:
                write()
        self.flush_events()

    def flush_events(self) -> None:
        if self._pending_events:
            self.journal.add_events(self._pending_events)
            self._pending_events = []

    # -- the run -------------------------------------------------------------------------------

    async def apply(self) -> RunReport:
        # Records are batched (50 ms); every one names only durable objects: the object store
        # fsyncs what is pending right before each commit (grouped, not one fsync per step).
        self.journal.batch_commits()
        self.objects.defer_sync()
        self.journal.before_commit = self.objects.sync
        try:
            report = await self._apply()
            if self.remote is not None:
                await self.remote.drain()  # pushes finish before the run is reported done
            return report
        except DiskFull as exc:
            # the pending batch and "interrupted" go in on the space the journal kept aside
            self.journal.stop_for_full_disk(exc)
            raise
        finally:
            try:
                self.journal.end_batch()
            finally:
                self.journal.before_commit = None
                self.objects.stop_deferring()

    async def _apply(self) -> RunReport:
        plan = self.plan
        self._check_gates()
        # Steps whose outcome is reused (watch) need no cached results: load only the others.
        needed = [sid for sid in plan.order if sid not in self.options.reuse]
        self.cached = self.journal.cached_results(plan.name, needed if self.options.reuse else None)
        self.edited_steps = overrides.any_active(self.journal, plan.name)
        started = time.time()
        item = self.options.item
        if plan.uses_collections:
            from ..collections import bind_state

            bind_state(self.state_dir)  # collection_has checks read this state's collections
        if self.options.resume_run_id is None:
            self.journal.create_run(
                {
                    "id": self.run_id,
                    "pipeline": plan.name,
                    "pipeline_file": str(plan.file.resolve()),
                    "item": item,
                    "status": RunStatus.RUNNING.value,
                    "kind": self.options.kind,
                    "parent_run_id": self.options.parent_run_id,
                    "params": dumps(plan.params),
                    "pid": os.getpid(),
                    "reference_asset": self.options.reference_asset,
                }
            )
        else:
            self.journal.update_run(
                self.run_id,
                status=RunStatus.RUNNING.value,
                pid=os.getpid(),
                finished_at=None,
                exit_code=None,
                reason=None,
                cancel_requested=None,
                params=dumps(plan.params),
            )
            self._load_reviews()
        self.emit(EventType.RUN_STARTED, pipeline=plan.name, item=item, steps=len(plan.order))
        self.flush_events()
        status = RunStatus.RUNNING
        main = asyncio.create_task(self._run_all())
        watcher = asyncio.create_task(self._watch_cancel(main))
        try:
            wall = self.options.wall_clock or plan.limits.wall_clock
            if wall is not None:
                try:
                    await asyncio.wait_for(main, timeout=wall)
                except TimeoutError:
                    self.abort_reason = f"limit wall_clock of {wall:g}s reached"
            else:
                await main
        except asyncio.CancelledError:
            current = asyncio.current_task()
            status = RunStatus.CANCELLED
            if self.cancel_requested and (current is None or not current.cancelling()):
                # `runner runs cancel` from elsewhere: a normal end with exit 130
                return self._finish(status, started, "cancelled with runner runs cancel")
            main.cancel()
            self._finish(status, started, "cancelled by the user")
            raise
        finally:
            watcher.cancel()
        report = self._finish(None, started, self.abort_reason)
        return report

    async def _watch_cancel(self, main: asyncio.Task[None]) -> None:
        """Poll the journal for a cancel request; cancel the run's work when one appears."""
        while not main.done():
            await asyncio.sleep(CANCEL_POLL_S)
            rows = self.journal.query(
                "SELECT cancel_requested FROM runs WHERE id=?", (self.run_id,)
            )
            if rows and rows[0]["cancel_requested"]:
                self.cancel_requested = True
                main.cancel()
                return

    def _check_gates(self) -> None:
        for step in self.plan.steps.values():
            if not getattr(step.type, "is_gate", False):
                continue
            if step.for_each is not None:
                raise InvalidPipeline(
                    f"step '{step.id}': a human_gate cannot use for_each", where=step.where
                )
            revise = self._revise_target(step)
            if revise is not None and revise not in self.plan.steps:
                raise InvalidPipeline(
                    f"step '{step.id}': revise names an unknown step '{revise}'", where=step.where
                )

    def _revise_target(self, step: CompiledStep) -> str | None:
        raw = step.args.get("revise") if isinstance(step.args, dict) else None
        return raw if isinstance(raw, str) else None

    def _load_reviews(self) -> None:
        rows = gates.decisions(self.journal, self.run_id)
        for step in self.plan.steps.values():
            target = self._revise_target(step) if getattr(step.type, "is_gate", False) else None
            if target is None:
                continue
            review = gates.review_for([r for r in rows if r.gate == step.id])
            if review is not None:
                self.reviews[target] = review

    def _finish(self, forced: RunStatus | None, started: float, reason: str | None) -> RunReport:
        steps = []
        for sid in self.plan.order:
            outcome = self.outcomes.get(sid)
            if outcome is None:
                # Never reached (cancelled, aborted): shown skipped, in the stream as well.
                outcome = StepOutcome(sid, StepStatus.SKIPPED, reason=reason or "not reached")
                if sid not in self.finished:
                    self.emit(EventType.STEP_SKIPPED, sid, reason=outcome.reason)
                    self._mark_finished(sid, StepStatus.SKIPPED)
            steps.append(outcome)
        status, exit_code = forced, 130
        if status is None:
            status, exit_code = run_status(steps, aborted=reason is not None)
        self.hasher.flush()
        self.journal.update_run(
            self.run_id,
            status=status.value,
            finished_at=time.time(),
            exit_code=exit_code,
            reason=reason,
            current_phase=self.current_phase,
            progress=dumps(self.progress()),
        )
        self.emit(
            EventType.RUN_FINISHED,
            status=status.value,
            exit_code=exit_code,
            duration_s=round(time.time() - started, 6),
            reason=reason,
        )
        self.flush_events()
        return RunReport(
            self.run_id,
            self.plan.name,
            status,
            self.options.item,
            steps,
            exit_code,
            reason,
            inputs=dict(self.hasher.used),
            workspace=self.workspace_used,
            objects=self.objects_used,
        )

    async def _run_all(self) -> None:
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

        def launch(sid: str) -> None:
            task = asyncio.create_task(self._step(plan.steps[sid]), name=sid)
            task.add_done_callback(finished.put_nowait)
            running[task] = sid

        for sid in plan.order:
            if not remaining[sid]:
                launch(sid)
        try:
            while running:
                done = [await finished.get()]
                while not finished.empty():
                    done.append(finished.get_nowait())
                launched = False
                for task in sorted(done, key=lambda t: position[running[t]]):
                    sid = running.pop(task)
                    self.outcomes[sid] = task.result()
                    for dep in dependents[sid]:
                        remaining[dep].discard(sid)
                        if not remaining[dep] and self.abort_reason is None:
                            launch(dep)
                            launched = True
                if launched:
                    await asyncio.sleep(0)  # the new steps start (a process spawned) first
                self._flush_deferred()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            self._flush_deferred()

    # -- one step ------------------------------------------------------------------------------

    def _context(self, **extra: Any) -> dict[str, Any]:
        ctx = {
            "params": self.plan.params,
            "steps": self.context_steps,
            "run": {"id": self.run_id, "item": self.options.item},
            "feedback": [],
            "attempt": 1,
        }
        ctx.update(extra)
        return ctx

    def progress(self) -> dict[str, dict[str, int]]:
        """Per phase (steps without one under "default"): total, done, skipped, failed, waiting.

        Kept incrementally (``_count``): recomputing it per finished step was quadratic.
        """
        if self._progress is None:
            self._progress = {}
            for sid in self.plan.order:
                phase = self.plan.steps[sid].phase or "default"
                entry = self._progress.setdefault(
                    phase, {"total": 0, "done": 0, "skipped": 0, "failed": 0, "waiting": 0}
                )
                entry["total"] += 1
            for sid, status in self.finished.items():
                self._count(sid, status)
        return self._progress

    def _count(self, sid: str, status: StepStatus) -> None:
        entry = self.progress()[self.plan.steps[sid].phase or "default"]
        if status.succeeded:
            entry["done"] += 1
        elif status is StepStatus.SKIPPED:
            entry["skipped"] += 1
        elif status is StepStatus.AWAITING_HUMAN:
            entry["waiting"] += 1
        else:  # failed, partial, rejected
            entry["failed"] += 1

    def _mark_finished(self, sid: str, status: StepStatus) -> None:
        if sid in self.finished:
            return
        self.finished[sid] = status
        if self._progress is not None:
            self._count(sid, status)

    def _blocked(self, step: CompiledStep) -> str | None:
        for d in step.deps:
            o = self.outcomes[d]
            if o.status is StepStatus.FAILED:
                return f"upstream '{d}' failed"
            if o.status is StepStatus.AWAITING_HUMAN:
                return f"waiting for the decision at '{d}'"
            if o.status is StepStatus.REJECTED:
                return f"rejected at '{d}'"
            if o.status is StepStatus.SKIPPED and step.on_skipped != "run":
                return f"upstream '{d}' was skipped"
            if o.status is StepStatus.PARTIAL and (
                step.needs_complete or step.on_partial != "continue"
            ):
                return f"upstream '{d}' is partial"
        return None

    def _set_phase(self, step: CompiledStep) -> None:
        if step.phase and step.phase != self.current_phase:
            self.current_phase = step.phase
            self.journal.update_run(self.run_id, current_phase=step.phase)
            self.emit(EventType.PHASE_ENTERED, phase=step.phase)

    async def _step(self, step: CompiledStep) -> StepOutcome:
        reused = self.options.reuse.get(step.id)
        if reused is not None and not self._blocked(step):
            self.emit(EventType.STEP_SKIPPED, step.id, reason="cached", key=reused.key, reused=True)
            return self._record_outcome(_as_cached(reused))
        blocked = self._blocked(step)
        if blocked is not None:
            self.emit(EventType.STEP_SKIPPED, step.id, reason=blocked)
            return self._record_outcome(StepOutcome(step.id, StepStatus.SKIPPED, reason=blocked))
        self._set_phase(step)
        started = time.perf_counter()
        try:
            if step.when is not None:
                verdict = await step.when.evaluate(self._context(), root=self.plan.root)
                if verdict.error:  # a condition that cannot be evaluated is a failure, not a skip
                    reason = "when: " + "; ".join(verdict.reasons or ["cannot be evaluated"])
                    self.emit(EventType.STEP_FAILED, step.id, reason=reason)
                    return self._record_outcome(
                        StepOutcome(step.id, StepStatus.FAILED, reason=reason)
                    )
                if not verdict.passed:
                    reason = (
                        "when: " + "; ".join(verdict.reasons)
                        if verdict.reasons
                        else "when is false"
                    )
                    self.emit(EventType.STEP_SKIPPED, step.id, reason=reason)
                    return self._record_outcome(
                        StepOutcome(step.id, StepStatus.SKIPPED, reason=reason)
                    )
            if getattr(step.type, "is_gate", False):
                outcome = await self._gate(step)
            elif step.for_each is not None:
                outcome = await self._for_each(step)
            else:
                el = await self._execution(step, None, None, has_item=False)
                outcome = StepOutcome(
                    step.id, el.status, el.key, el.output, el.reason, check_failure=el.check_failure
                )
        except (RunnerError, StepFailure) as exc:  # an expression that failed on real data
            reason = exc.reason if isinstance(exc, StepFailure) else str(exc)
            self.emit(EventType.STEP_FAILED, step.id, reason=reason)
            outcome = StepOutcome(step.id, StepStatus.FAILED, reason=reason)
        outcome.duration_s = time.perf_counter() - started
        return self._record_outcome(outcome)

    async def _gate(self, step: CompiledStep) -> StepOutcome:
        """A human_gate: pass on an approval of exactly what is shown now, else ask (suspend)."""
        args, parts = self._resolve(step, {})
        # A decision is about this item and these upstream results, not only the text shown.
        upstream = {
            d: self.outcomes[d].key or [e.key for e in self.outcomes[d].elements or []]
            for d in step.deps
        }
        key = canonical_digest(
            {"args": parts.key(), "item": self.options.item, "upstream": upstream}
        )
        hit = self.cached.get((step.id, key))
        if (
            hit is not None
            and hit.status == "completed"
            and step.cache is CachePolicy.USE
            and step.id not in self.options.force
            and self._usable(hit)
        ):
            # Approved before with these very inputs (an earlier run): no need to ask again.
            self.emit(EventType.STEP_SKIPPED, step.id, reason="cached", key=key, restored=[])
            self._journal_reused(step, -1, key, hit.output, "approved before with the same inputs")
            return StepOutcome(step.id, StepStatus.CACHED, key, hit.output)
        rows = gates.decisions(self.journal, self.run_id, step.id)
        last = rows[-1] if rows else None
        if (
            last is not None
            and last.status is gates.RowStatus.DECIDED
            and last.key == key
            and last.decision in (gates.Decision.APPROVE, gates.Decision.REJECT)
        ):
            return self._decided(step, key, last)
        if last is not None and last.status is gates.RowStatus.PENDING and last.key == key:
            return self._awaiting(step, key, last.round, last.summary, again=True)
        # Nothing asked yet, a revision was made, or what is shown changed: ask (a new round).
        round_ = (last.round + 1) if last is not None else 1
        summary = {
            "summary": args.get("summary"),
            "show": args.get("show"),
            "images": args.get("images") or [],
            "revise": args.get("revise"),
            "round": round_,
            "step": step.id,
        }
        gates.request_decision(
            self.journal, run_id=self.run_id, gate=step.id, round_=round_, key=key, summary=summary
        )
        return self._awaiting(step, key, round_, summary, again=False)

    def _awaiting(
        self, step: CompiledStep, key: str, round_: int, summary: dict[str, Any], *, again: bool
    ) -> StepOutcome:
        reason = (
            f"waiting for a decision: runner decide {self.run_id} {step.id} approve|reject|revise"
        )
        self.emit(
            EventType.GATE_AWAITING, step.id, key=key, round=round_, summary=summary, again=again
        )
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step.id,
                "element": -1,
                "key": key,
                "status": "awaiting_human",
                "pipeline": self.plan.name,
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": 0,
                "why": f"round {round_}",
            }
        )
        return StepOutcome(step.id, StepStatus.AWAITING_HUMAN, key, reason=reason)

    def _decided(self, step: CompiledStep, key: str, row: gates.DecisionRow) -> StepOutcome:
        assert row.decision is not None
        output = {
            "decision": row.decision.value,
            "by": row.by,
            "comment": row.comment,
            "input": row.input,
            "round": row.round,
        }
        self.emit(
            EventType.GATE_DECIDED,
            step.id,
            decision=row.decision.value,
            by=row.by,
            round=row.round,
            key=key,
        )
        artifacts = [row.artifact] if row.artifact else []
        approved = row.decision is gates.Decision.APPROVE
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step.id,
                "element": -1,
                "key": key,
                "status": "completed" if approved else "rejected",
                "pipeline": self.plan.name,
                "output": dumps(output),
                "artifacts": dumps(artifacts),
                "files": dumps({}),
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": 1,
                "why": f"{row.decision.value} by {row.by} (round {row.round})",
            }
        )
        if approved:
            self.emit(EventType.STEP_PASSED, step.id, key=key, duration_s=0.0, attempts=1)
            return StepOutcome(step.id, StepStatus.RAN, key, output)
        reason = f"rejected by {row.by}" + (f": {row.comment}" if row.comment else "")
        self.emit(EventType.STEP_FAILED, step.id, reason=reason, rejected=True)
        return StepOutcome(step.id, StepStatus.REJECTED, key, output, reason)

    def _record_outcome(self, outcome: StepOutcome) -> StepOutcome:
        if outcome.id in self._reads:
            outcome.reads = frozenset(self._reads[outcome.id])
        self._mark_finished(outcome.id, outcome.status)
        now = time.monotonic()
        if now - self._progress_written > 0.2:  # the final record is written by _finish
            self._progress_written = now
            self.journal.update_run(self.run_id, progress=dumps(self.progress()))
        entry: dict[str, Any] = {"status": outcome.status.value, "output": outcome.output}
        if outcome.elements is not None:
            entry["elements"] = [
                {"index": e.index, "status": e.status.value, "output": e.output, "reason": e.reason}
                for e in outcome.elements
            ]
        self.context_steps[outcome.id] = entry
        return outcome

    async def _for_each(self, step: CompiledStep) -> StepOutcome:
        items = ex.evaluate_value(step.for_each, self._context())
        if isinstance(items, dict):
            items = list(items.items())
        if not isinstance(items, list):
            raise StepFailure(f"for_each must give a list, found {type(items).__name__}")
        limit = asyncio.Semaphore(step.concurrency or len(items) or 1)

        async def one(index: int, item: Any) -> ElementOutcome:
            async with limit:
                return await self._execution(step, index, item, has_item=True)

        # Every element ends before an error (a full disk) leaves the step: none is left
        # running with an exception no one retrieves.
        results = await asyncio.gather(
            *(one(i, it) for i, it in enumerate(items)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        elements = [r for r in results if isinstance(r, ElementOutcome)]
        failed = [e for e in elements if e.status is StepStatus.FAILED]
        ok = [e for e in elements if e.status.succeeded or e.status is StepStatus.PARTIAL]
        output = [e.output for e in elements if e.status.succeeded]
        if failed and not ok:
            status = StepStatus.FAILED
        elif failed or any(e.status is StepStatus.PARTIAL for e in elements):
            status = StepStatus.PARTIAL
        elif elements and all(e.status is StepStatus.CACHED for e in elements):
            status = StepStatus.CACHED
        else:
            status = StepStatus.RAN
        reason = None
        if failed:
            reason = f"{len(failed)} of {len(elements)} elements failed: " + "; ".join(
                f"[{e.index}] {e.reason}" for e in failed[:3]
            )
        return StepOutcome(
            step.id,
            status,
            None,
            output,
            reason,
            elements=elements,
            check_failure=bool(failed) and all(e.check_failure for e in failed),
        )

    def _resolve(
        self, step: CompiledStep, extra: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyParts]:
        review = self.reviews.get(step.id)
        if review is not None:
            extra = {"feedback": list(review["feedback"]), "review": review, **extra}
        args = step.type.evaluate(step.args, self._context(**extra))
        files: dict[str, str] = {}
        for rel in step.type.reads(args, root=self.plan.root):
            path = self.plan.root / rel
            try:
                files[rel] = self.hasher.hash(path)
            except FileNotFoundError:
                raise StepFailure(f"input file {rel} does not exist") from None
        key_extra = step.type.key_extra(args, self.env)
        if review is not None:  # a revision is an input: it and its downstream re-run
            key_extra = {**key_extra, "review": review}
        parts = KeyParts(
            step.uses,
            step.type.version,
            args,
            files,
            key_extra,
            step.version,
            extra.get("item"),
            "item" in extra,
        )
        return args, parts

    def _contract(self, step: CompiledStep, extra: dict[str, Any], key: str) -> str | None:
        """What this execution's output is made under (see runner/overrides.py)."""
        if step.contract is None:
            return key
        try:
            value = ex.evaluate_value(step.contract, self._context(**extra))
        except RunnerError:
            return None  # missing or invalid: no edit can hold against it
        return None if value is None else str(value)

    def _use_override(
        self, step: CompiledStep, index: int | None, el_index: int, key: str, contract: str | None
    ) -> ElementOutcome | None:
        """A user edit of this element, when its contract still holds; else it is set aside."""
        ov = overrides.active(self.journal, self.plan.name, step.id, el_index)
        if ov is None:
            return None
        if contract is None or contract != ov.contract:
            why = (
                "its contract is missing or invalid"
                if contract is None
                else f"its contract changed ({(ov.contract or '')[:16]} -> {contract[:16]})"
            )
            reason = f"user edit #{ov.id} set aside: {why}; regenerating"
            overrides.set_aside(self.journal, ov.id, reason)
            self.emit(EventType.OVERRIDE_SET_ASIDE, step.id, index, override=ov.id, reason=reason)
            return None
        self.emit(EventType.OVERRIDE_USED, step.id, index, override=ov.id)
        self.emit(EventType.STEP_SKIPPED, step.id, index, reason="edited", key=key)
        self._journal_reused(step, el_index, key, ov.output, f"user edit #{ov.id}", contract)
        return ElementOutcome(el_index, StepStatus.CACHED, key, ov.output)

    def _journal_reused(
        self,
        step: CompiledStep,
        el_index: int,
        key: str,
        output: Any,
        why: str,
        contract: str | None = None,
        report: Any = None,
    ) -> None:
        """Journal an execution answered without running (cache, approval, user edit)."""
        now = time.time()
        self.journal.start_execution(
            {
                **({"report": dumps(report)} if report is not None else {}),
                "run_id": self.run_id,
                "step_id": step.id,
                "element": el_index,
                "key": key,
                "status": "cached",
                "pipeline": self.plan.name,
                "output": dumps(output),
                "started_at": now,
                "finished_at": now,
                "attempts": 0,
                "contract": contract,
                "why": why,
            }
        )

    async def _remote_hit(
        self,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        key: str,
        parts: KeyParts,
        contract: str | None,
    ) -> ElementOutcome | None:
        """The step's result from the remote cache, journaled here as a completed execution
        (so the next apply finds it locally), or None."""
        assert self.remote is not None
        hit = await self.remote.lookup(key)
        if hit is None:
            return None
        self.objects_used.update(hit.artifacts)
        self.workspace_used.update(hit.files)
        restored, _kept, refused = self._restore_files(step, index, hit.files)
        if refused is not None:
            raise StepFailure(refused)
        self.emit(
            EventType.STEP_SKIPPED,
            step.id,
            index,
            reason="cached (remote)",
            key=key,
            restored=restored,
        )
        now = time.time()
        sizes = {d: self.objects.size(d) for d in hit.artifacts}
        self.journal.record_artifacts(sizes)
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step.id,
                "element": el_index,
                "key": key,
                "status": "completed",
                "pipeline": self.plan.name,
                "output": dumps(hit.output),
                "artifacts": dumps(hit.artifacts),
                "files": dumps(hit.files),
                "report": dumps(hit.report) if hit.report is not None else None,
                "started_at": now,
                "finished_at": now,
                "attempts": 0,
                "key_parts": dumps(parts.summary()),
                "contract": contract,
                "why": "cached (remote)",
            }
        )
        return ElementOutcome(el_index, StepStatus.CACHED, key, hit.output)

    def _usable(self, cached: CachedResult) -> bool:
        usable = all(self.objects.has(d) for d in cached.artifacts) and all(
            self.objects.has(d) for d in cached.files.values()
        )
        if usable:
            self.objects_used.update(cached.artifacts)
            self.workspace_used.update(cached.files)
        return usable

    def _restore_files(
        self, step: CompiledStep, index: int | None, files: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str], str | None]:
        """Put back missing outputs, and outputs edited by hand (checked by content, with the
        journal's stat shortcut) as the step's ``on_edit`` says. Returns (restored files,
        {file: object digest of the kept edit}, the reason to fail or None)."""
        restored: list[str] = []
        kept: dict[str, str] = {}
        for rel, digest in files.items():
            # Resolved now, not from compile time: an earlier step may have swapped a directory
            # on the path for a symlink pointing out of the root.
            path = paths.inside_now(self.plan.root, rel)
            if path is None:
                raise StepFailure(
                    f"cached output {rel} now lies outside the root (a directory on its path is "
                    "a symlink pointing out); not restored"
                )
            try:
                now = self.hasher.hash(path)
            except FileNotFoundError:
                self.objects.restore(digest, path)
                restored.append(rel)
                continue
            if now == digest:
                continue
            where = f"{rel} was edited by hand ({digest[:12]} -> {now[:12]})"
            if step.on_edit == "fail":
                return restored, kept, f"{where}; on_edit: fail leaves it for you to resolve"
            if step.on_edit == "keep":
                self.emit(EventType.OUTPUT_EDITED, step.id, index, file=rel, action="kept")
                continue
            edited = self.objects.put_file(path)  # the user's bytes are never destroyed
            self.objects.restore(digest, path)
            self.hasher.forget(path)
            restored.append(rel)
            kept[rel] = edited
            self.emit(
                EventType.OUTPUT_EDITED,
                step.id,
                index,
                file=rel,
                action="restored",
                edited=edited,
                kept_at=str(self.objects.path(edited)),
            )
        return restored, kept, None

    async def _execution(
        self, step: CompiledStep, index: int | None, item: Any, *, has_item: bool
    ) -> ElementOutcome:
        extra: dict[str, Any] = {"item": item, "index": index} if has_item else {}
        el_index = -1 if index is None else index
        try:
            args, parts = self._resolve(step, extra)
            self._reads.setdefault(step.id, set()).update(parts.files)
            key = parts.key()  # arguments JSON cannot carry fail here, at their element
        except (StepFailure, ExpressionError, CanonicalError) as exc:
            reason = exc.reason if isinstance(exc, StepFailure) else str(exc)
            self.emit(EventType.STEP_FAILED, step.id, index, reason=reason)
            self._journal_failure(step, el_index, None, reason, 0)
            return ElementOutcome(el_index, StepStatus.FAILED, reason=reason)
        contract = self._contract(step, extra, key)
        self._contract_of[(step.id, el_index)] = contract
        if step.id in self.edited_steps:
            edited = self._use_override(step, index, el_index, key, contract)
            if edited is not None:
                return edited
        forced = step.id in self.options.force
        if step.cache is CachePolicy.USE and not forced:
            hit = self.cached.get((step.id, key))
            # A partial result (some iterations failed, a card drifted) is not a cache hit: the
            # next apply runs it again, and idempotency keys make the finished parts free.
            if hit is not None and hit.status == "completed" and self._usable(hit):
                try:
                    restored, kept, refused = self._restore_files(step, index, hit.files)
                except StepFailure as exc:
                    refused = exc.reason
                if refused is not None:
                    self.emit(EventType.STEP_FAILED, step.id, index, reason=refused)
                    self._journal_failure(step, el_index, key, refused, 0)
                    return ElementOutcome(el_index, StepStatus.FAILED, key, reason=refused)
                status = StepStatus.CACHED
                self.emit(
                    EventType.STEP_SKIPPED,
                    step.id,
                    index,
                    reason="cached",
                    key=key,
                    restored=restored,
                )
                why = "cached" + (f"; restored {', '.join(restored)}" if restored else "")
                report = {"edited_outputs_kept": kept} if kept else None  # gc keeps them
                self._journal_reused(step, el_index, key, hit.output, why, contract, report)
                return ElementOutcome(el_index, status, key, hit.output)
            if self.remote is not None and step.type.shareable and not self.options.dry_run:
                remote_hit = await self._remote_hit(step, index, el_index, key, parts, contract)
                if remote_hit is not None:
                    return remote_hit
        if self.options.remote_only:
            reason = "not in the remote cache"
            self.emit(EventType.STEP_SKIPPED, step.id, index, reason=reason, key=key)
            return ElementOutcome(el_index, StepStatus.SKIPPED, key, reason=reason)
        if self.options.dry_run:
            return ElementOutcome(el_index, StepStatus.RAN, key, None, reason="would run")
        if self.plan.limits.max_steps or self.options.max_steps:
            limit = self.options.max_steps or self.plan.limits.max_steps or 0
            if self.executions_started >= limit:
                self.abort_reason = f"limit max_steps of {limit} reached"
                reason = self.abort_reason
                self.emit(EventType.STEP_FAILED, step.id, index, reason=reason)
                return ElementOutcome(el_index, StepStatus.FAILED, key, reason=reason)
        self.executions_started += 1
        # The slot bounds CPU work: a provider call gives it back while it waits (slots.py).
        async with CpuSlot(self.jobs) as slot:
            with lend_slots(slot.released):
                return await self._run_attempts(step, index, el_index, args, parts, key, extra)

    def _journal_failure(
        self, step: CompiledStep, el_index: int, key: str | None, reason: str, attempts: int
    ) -> None:
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step.id,
                "element": el_index,
                "key": key,
                "status": "failed",
                "pipeline": self.plan.name,
                "error": reason,
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": attempts,
            }
        )

    async def _run_attempts(
        self,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        args: dict[str, Any],
        parts: KeyParts,
        key: str,
        extra: dict[str, Any],
    ) -> ElementOutcome:
        exec_id = self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step.id,
                "element": el_index,
                "key": key,
                "status": "running",
                "pipeline": self.plan.name,
                "started_at": time.time(),
                "attempts": 0,
                "key_parts": dumps(parts.summary()),
                "contract": self._contract_of.get((step.id, el_index)),
            }
        )
        # A revision's reviewer input is the first attempt's feedback.
        review = self.reviews.get(step.id)
        review_feedback: list[str] = list(review["feedback"]) if review else []
        if review is not None:
            extra = {**extra, "review": review}
        feedback: list[str] = list(review_feedback)
        reason = ""
        check_failure = False
        t0 = time.perf_counter()
        max_attempts = step.retries + 1
        attempt = 0
        failed_output: dict[str, Any] | None = None
        for attempt in range(1, max_attempts + 1):
            self.emit(EventType.STEP_STARTED, step.id, index, attempt=attempt, key=key)
            if attempt > 1:
                args = step.type.evaluate(
                    step.args, self._context(**{**extra, "feedback": feedback, "attempt": attempt})
                )
            ctx = StepContext(
                env=self.env,
                run_id=self.run_id,
                step_id=step.id,
                element=index,
                attempt=attempt,
                feedback=list(feedback),
                ledger=JournalLedger(self.journal, self.run_id, step.id),
                log=self._logger(step.id, index),
            )
            retryable = False
            try:
                coro = (
                    self.executor.run(step.type, ctx, args, resources=step.resources)
                    if self.executor is not None
                    else step.type.run(ctx, args)
                )
                result: StepResult = await (
                    asyncio.wait_for(coro, step.timeout) if step.timeout else coro
                )
            except TimeoutError:
                reason, retryable, check_failure = f"timed out after {step.timeout:g}s", True, False
            except StepFailure as exc:
                # A check failure raised by the step body itself (e.g. compliance) is
                # deterministic: only `check:` rules get retries with feedback.
                reason, retryable, check_failure = exc.reason, exc.retryable, exc.check
                failed_output = exc.output
            except ProviderError as exc:
                reason = f"{exc.kind} provider error: {exc.message}"
                retryable, check_failure = exc.transient, False
            except InvalidPipeline as exc:
                reason, retryable, check_failure = str(exc), False, False
            except DiskFull:
                raise  # not this step's failure: the run stops (see apply)
            except RunnerError as exc:
                reason, retryable, check_failure = str(exc), False, False
            except asyncio.CancelledError:
                self.journal.finish_execution(
                    exec_id,
                    status="cancelled",
                    finished_at=time.time(),
                    attempts=attempt,
                    error="cancelled",
                )
                raise
            except Exception as exc:  # a bug in a step type: record it with its traceback
                tb = traceback.format_exc(limit=8)
                reason = f"internal error in step type '{step.uses}': {type(exc).__name__}: {exc}"
                self.emit(EventType.LOG, step.id, index, line=tb)
            else:
                failed_checks = await self._checks(step, result, extra, attempt)
                if not failed_checks:
                    return self._passed(step, index, el_index, exec_id, key, result, attempt, t0)
                reason = "; ".join(failed_checks)
                retryable, check_failure = True, True
                feedback = review_feedback + failed_checks
            if attempt < max_attempts and retryable:
                delay = (
                    0.0
                    if check_failure
                    else (min(30.0, 0.2 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0))
                )
                self.emit(
                    EventType.STEP_RETRYING,
                    step.id,
                    index,
                    attempt=attempt + 1,
                    reason=reason,
                    delay_s=round(delay, 3),
                )
                if not check_failure:
                    feedback = [*review_feedback, reason]
                if delay:
                    await asyncio.sleep(delay)
                continue
            break
        self.journal.finish_execution(
            exec_id,
            status="failed",
            finished_at=time.time(),
            attempts=attempt,
            error=reason,
            duration_s=time.perf_counter() - t0,
            output=dumps(failed_output) if failed_output is not None else None,
        )
        self.emit(
            EventType.STEP_FAILED,
            step.id,
            index,
            reason=reason,
            attempts=attempt,
            check=check_failure,
        )
        return ElementOutcome(
            el_index,
            StepStatus.FAILED,
            key,
            failed_output,
            reason,
            check_failure,
            time.perf_counter() - t0,
        )

    def _logger(self, step_id: str, index: int | None) -> Callable[[str], None]:
        def log(line: str) -> None:
            self.emit(EventType.LOG, step_id, index, line=line)

        return log

    async def _checks(
        self, step: CompiledStep, result: StepResult, extra: dict[str, Any], attempt: int
    ) -> list[str]:
        if not step.checks:
            return []
        steps_view = dict(self.context_steps)
        steps_view[step.id] = {"status": "ran", "output": result.output}
        ctx = self._context(**extra, steps=steps_view, output=result.output, attempt=attempt)
        reasons: list[str] = []
        for rule in step.checks:
            verdict = await rule.evaluate(ctx, root=self.plan.root)
            if not verdict.passed:
                reasons.extend(verdict.reasons or ["check failed"])
        return reasons

    def _passed(
        self,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        exec_id: int,
        key: str,
        result: StepResult,
        attempt: int,
        t0: float,
    ) -> ElementOutcome:
        digests = set(result.artifacts) | set(result.files.values())
        self.objects_used.update(result.artifacts)
        self.workspace_used.update(result.files)
        sizes = {}
        for d in digests:
            try:
                sizes[d] = self.objects.size(d)
            except StoreError:
                raise StepFailure(
                    f"step type '{step.uses}' referenced object {d[:12]} it never stored"
                ) from None
        status = "partial" if result.status is ResultStatus.PARTIAL else "completed"
        duration = time.perf_counter() - t0
        # Serialised now, written maybe a moment later: what is recorded is the output as it
        # was returned, whatever a later step does with the objects.
        row = {
            "status": status,
            "finished_at": time.time(),
            "attempts": attempt,
            "duration_s": duration,
            "output": dumps(result.output),
            "artifacts": dumps(sorted(digests)),
            "files": dumps(result.files),
            "report": dumps(result.report) if result.report is not None else None,
            "usage": dumps(result.usage) if result.usage else None,
        }

        def record() -> None:
            self.journal.record_artifacts(sizes)
            self.journal.finish_execution(exec_id, **row)

        if index is None:
            self._deferred.append(record)  # a plain step: written once its dependents started
        else:
            record()  # an element: written now (a for_each may hold thousands)
        if self.remote is not None and status == "completed" and step.type.shareable:
            self.remote.push(
                key=key,
                step_type=f"{step.uses}@{step.type.version}",
                output=result.output,
                artifacts=sizes,
                files=dict(result.files),
                report=result.report,
            )
        if result.usage:
            self.tokens_used += sum(v for v in result.usage.values() if isinstance(v, int))
            budget = self.options.token_budget or self.plan.limits.token_budget
            if budget is not None and self.tokens_used > budget:
                self.abort_reason = (
                    f"limit token_budget of {budget} reached ({self.tokens_used} tokens used)"
                )
        if result.status is ResultStatus.PARTIAL:
            self.emit(
                EventType.STEP_FAILED,
                step.id,
                index,
                partial=True,
                report=result.report,
                reason="partial",
            )
            return ElementOutcome(
                el_index,
                StepStatus.PARTIAL,
                key,
                result.output,
                reason="partial",
                duration_s=duration,
            )
        where = getattr(self.executor, "where", {}).get((step.id, index))
        self.emit(
            EventType.STEP_PASSED,
            step.id,
            index,
            key=key,
            duration_s=round(duration, 6),
            attempts=attempt,
            **({"worker": where} if where else {}),
        )
        return ElementOutcome(el_index, StepStatus.RAN, key, result.output, duration_s=duration)


def run_status(steps: list[StepOutcome], *, aborted: bool = False) -> tuple[RunStatus, int]:
    """The run's status and exit code from its steps (design/overview.md, exit codes).

    A rejected gate ends the run ``rejected`` with exit 8 (REJECTED_EXIT): not a failure, but
    not a success either, so `runner apply ... && upload` never uploads a rejected draft.
    """
    if any(s.status is StepStatus.REJECTED for s in steps):
        return RunStatus.REJECTED, REJECTED_EXIT
    if any(s.status is StepStatus.AWAITING_HUMAN for s in steps):
        return RunStatus.AWAITING_HUMAN, 7
    failed = [s for s in steps if s.status is StepStatus.FAILED]
    partial = [s for s in steps if s.status is StepStatus.PARTIAL]
    succeeded = [s for s in steps if s.status.succeeded or s.status is StepStatus.PARTIAL]
    if aborted:
        return RunStatus.FAILED, 4 if not succeeded else 6
    if not failed and not partial:
        return RunStatus.COMPLETED, 0
    all_checks = (
        all(s.check_failure for s in failed)
        and all(
            s.check_failure
            or not s.elements
            or all(e.check_failure for e in s.elements if e.status is StepStatus.FAILED)
            for s in partial
        )
        and bool(
            failed
            or any(e.status is StepStatus.FAILED for s in partial for e in (s.elements or []))
        )
    )
    if failed and not succeeded:
        return RunStatus.FAILED, 5 if all_checks else 4
    return RunStatus.PARTIAL, 5 if all_checks else 6


def _as_cached(outcome: StepOutcome) -> StepOutcome:
    """A previous cycle's outcome, reported as cached this time."""
    elements = None
    if outcome.elements is not None:
        elements = [
            dataclasses.replace(e, status=StepStatus.CACHED) if e.status is StepStatus.RAN else e
            for e in outcome.elements
        ]
    return dataclasses.replace(outcome, status=StepStatus.CACHED, duration_s=0.0, elements=elements)
