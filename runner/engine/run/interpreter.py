"""The journaling interpreter: runs a compiled Plan, converging on what is missing or stale.

Ready steps run concurrently up to ``jobs``. A step whose key matches a completed execution with
its objects present is not run (``cached``); a deleted output file is restored from the store.
Step failures are recorded values: they stop the failing step's dependents and let independent
branches finish.

This is the coordinator: it resolves each step's arguments and key and decides between reuse
and a run. Around it: an execution run for real (execution.py: attempts, checks, the pass
recorded), the scheduler (scheduler.py: what is ready, the ``--jobs`` slots, cancellation), the
step body's side of the seam (stepbody.py, run through an executor: executors.py), the recorder
(recorder.py: journal rows and events), reuse.py (cache, user edits, remote cache), foreach.py
(elements through a window) and gatestep.py (human gates).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import expr as ex
from ...errors import DiskFull, ExpressionError, RunnerError, StepFailure
from ...expr.commandscope import scoped
from ...pipeline.compiler import CachePolicy, CompiledStep, Plan
from ...providers.pool import notices as pool_notices
from ...source import secretmask
from ...state import overrides
from ...state.canonical import CanonicalError
from ...state.journal import CachedResults, Journal
from ...state.objects import ObjectStore
from ...steps.base import ProviderAccess, StepEnv
from . import batchrounds, reusedsteps, sandboxstart
from .events import EventType, NullReporter, Reporter
from .execution import Executions
from .executors import Executor
from .files import FileHasher
from .foreach import run_elements
from .keys import KeyParts, identities, resolve
from .options import ApplyOptions
from .outcomes import (
    ElementOutcome,
    RunReport,
    RunStatus,
    StepOutcome,
    StepStatus,
    as_cached,
    for_each_outcome,
    run_status,
    settle,
)
from .progress import Progress
from .recorded import RecordedReads
from .recorder import Recorder, new_run_id
from .reuse import Reuse
from .scheduler import Scheduler

if TYPE_CHECKING:
    from .remote_link import RemoteLink  # imported by apply only when a remote is configured

# An execution's (extra context, element index, arguments, key parts, key, contract).
_Ready = tuple[dict[str, Any], int, dict[str, Any], KeyParts, str, str | None]


def _plain(step: CompiledStep, el: ElementOutcome) -> StepOutcome:
    return StepOutcome(
        step.id, el.status, el.key, el.output, el.reason, check_failure=el.check_failure
    )


# A run goes round again for each revision remembered from another run, at most this often.
MAX_PASSES = 32


class Interpreter(Executions):
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
        # The project's secrets, masked in all the run records and gone from /proc/PID/environ
        # before any step can read it.
        secretmask.learn_project(plan.root)
        self.env = StepEnv(
            root=plan.root,
            state_dir=state_dir,
            objects=objects,
            providers=providers,
            pipeline_file=plan.file,
            retry_uncertain=self.options.retry_uncertain,
        )
        self.run_id = self.options.resume_run_id or self.options.run_id or new_run_id()
        self.recorder = Recorder(journal, reporter or NullReporter(), self.run_id, plan.name)
        self.batches = batchrounds.RunBatches(
            journal, self.run_id, say=self._say_batch, budget=self.spend
        )
        self.env.batches = self.batches
        self.scheduler = Scheduler(plan, self.options.jobs)
        hasher = self.options.hasher or FileHasher(journal)
        self.reuse = Reuse(plan, journal, objects, hasher, self.recorder)
        self.recorded = RecordedReads(journal, plan.name)  # what bodies read, as recorded
        self.progress = Progress(plan)
        self.outcomes = self.scheduler.outcomes
        self.context_steps: dict[str, dict[str, Any]] = {}
        self.executions_started = 0
        self.tokens_used = 0
        self.abort_reason: str | None = None
        self.cached = CachedResults(None, plan.name)  # the journal's, once the run starts
        self.current_phase: str | None = None
        self.reviews: dict[str, dict[str, Any]] = {}  # revise target step -> review context
        # A gate took a revision another run made on the same inputs: its target runs again
        # with the review, in a second pass of this run (gatestep.py).
        self.revise_again = False
        # revise target -> the revisions its review is made of; those the next pass takes
        self.review_rows: dict[str, list[Any]] = {}
        self.next_reviews: dict[str, list[Any]] = {}
        self._only: frozenset[str] | None = None  # the first pass's steps (gatestep.first_pass)
        # The plan's human gates (gatestep.is_gate, without importing the gate modules: a plan
        # without one, most, never loads them; issue 43).
        self._gates = frozenset(
            s.id for s in plan.steps.values() if getattr(s.type, "is_gate", False)
        )
        self._carried: dict[str, StepOutcome] = {}  # outcomes a later pass takes as they are
        self._reads: dict[str, set[str]] = {}
        self.reads: dict[str, list[str]] = {}  # read step -> what it read, for the fingerprint
        self._kept: dict[tuple[str, int], dict[str, str]] = {}  # edits kept before a re-run
        self.edited_steps: set[str] = set()
        self._prepared: dict[str, _Ready] = {}  # by _step_now, for _step to go on from
        self.remote: RemoteLink | None = None  # set by apply when a remote cache is configured
        self.executor: Executor | None = None  # set by apply for --executor dask (else local)

    @property
    def hasher(self) -> FileHasher:  # the planner sets its own, on reuse
        return self.reuse.hasher

    def emit_warning(self, message: str) -> None:
        """A warning for the user (consoles show it; the run goes on)."""
        self.recorder.emit_warning(message)

    # -- the run -------------------------------------------------------------------------------

    async def apply(self) -> RunReport:
        # Records are batched (50 ms); every one names only durable objects: the object store
        # fsyncs what is pending right before each commit (grouped, not one fsync per step).
        self.journal.batch_commits()
        self.objects.defer_sync()
        self.journal.before_commit = self.objects.sync
        try:
            # A backend going down or coming back is told on the console as it happens.
            with pool_notices(self.emit_warning):
                report = await self._apply()
            # bubblewrap found but unable to run is learnt at a command
            sandboxstart.say_unconfined(self.plan, self.emit_warning)
            if self.remote is not None:
                await self.remote.drain()  # pushes finish before the run is reported done
            return report
        except DiskFull as exc:
            # the pending batch and "interrupted" go in on the space the journal kept aside
            with contextlib.suppress(DiskFull):
                self.recorder.write_held()
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
        if self._gates:
            from . import gatestep

            gatestep.check_gates(plan)
        sandboxstart.say_unconfined(plan, self.emit_warning)
        # Steps a watch cycle reuses ask for no result: the rest are looked up one by one.
        self.cached = self.journal.cached_results(
            plan.name, preload=not self.options.reuse, steps=plan.steps.keys()
        )
        self.edited_steps = overrides.any_active(self.journal, plan.name)
        sandboxstart.warm(plan, self.cached.first_run)
        started = time.time()
        item = self.options.item
        if plan.uses_collections:
            from ...state.collections import bind_state

            bind_state(self.state_dir)  # collection_has checks read this state's collections
        if self.options.resume_run_id is None:
            self.recorder.run_started(plan, self.options)
        else:
            self.recorder.run_resumed(plan)
        self.recorder.emit(
            EventType.RUN_STARTED, pipeline=plan.name, item=item, steps=len(plan.order)
        )
        self.recorder.flush_events()
        # A gate that was revised before may take that revision again: the first pass then
        # runs only what such gates read, so nothing else is made from the unrevised result.
        if self._gates:
            from . import gatestep

            self._only = gatestep.first_pass(plan, self.journal)
        for _ in range(MAX_PASSES):
            stopped = await self._pass(started)
            if stopped is not None:
                return stopped
            if self.abort_reason is not None:
                break
            if not self.revise_again and self._only is None:
                break
            # While revisions are followed the passes stay on what the gates read (nothing
            # else is made from a draft a later round replaces); the last pass runs the rest.
            self._next_pass(follow=self.revise_again)
        return self._finish(None, started, self.abort_reason)

    async def _pass(self, started: float) -> RunReport | None:
        """Run the steps once; a report only when the run was cancelled from elsewhere."""
        # (a later pass, its carried outcomes first, or a first pass of gates owes none)
        first = not self._carried and self._only is None
        owed = reusedsteps.owed(self.plan, self.options.reuse, self._gates) if first else None
        main = asyncio.create_task(
            self.scheduler.run(
                self._step,
                stopped=lambda: self.abort_reason is not None or self.revise_again,
                settle=self.recorder.flush_deferred,
                now=self._step_now,
                only=self._only,
                owed=owed or frozenset(),
                answer=self._answer_reused,
            )
        )
        watcher = asyncio.create_task(
            self.scheduler.watch_cancel(main, self.recorder.cancel_requested)
        )
        try:
            wall = self.options.wall_clock or self.plan.limits.wall_clock
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
            self.batches.stop()  # (a batch's poll is shielded from its elements' cancel)
            if self.scheduler.cancel_requested and (current is None or not current.cancelling()):
                # `runner runs cancel` from elsewhere: a normal end with exit 130
                await batchrounds.cancel(self.batches.open(), self.recorder, self.env.providers)
                return self._finish(status, started, "cancelled with runner runs cancel")
            main.cancel()
            self._finish(status, started, "cancelled by the user")
            raise
        finally:
            watcher.cancel()
        return None

    def _answer_reused(self, steps: list[CompiledStep]) -> list[StepOutcome]:
        """``_step_now`` of each of ``steps`` (owed: reused, never blocked), in one pass."""
        out = []
        for step in steps:
            reused = self.options.reuse[step.id]
            self.recorder.emit(
                EventType.STEP_SKIPPED, step.id, reason="cached", key=reused.key, reused=True
            )
            out.append(self._record_outcome(reusedsteps.journal(self.recorder, as_cached(reused))))
        return out

    def _next_pass(self, *, follow: bool) -> None:
        """Start the steps again with the reviews this run now holds: only what the gates read
        while ``follow``ing revisions, else all. What the last pass answered and no new review
        reaches is carried over as it is (not journaled twice)."""
        self.revise_again = False
        if not follow:
            self._only = None
        self.current_phase = None  # each phase of the pass is entered (and shown) in order again
        self.recorder.write_held()
        self.review_rows.update(self.next_reviews)
        self.next_reviews = {}
        from . import gates  # (a pass after the first: the plan has gates)

        reviews = {t: r for t, rows in self.review_rows.items() if (r := gates.review_for(rows))}
        changed = {
            t for t in reviews.keys() | self.reviews.keys() if reviews.get(t) != self.reviews.get(t)
        }
        affected = self.plan.downstream(changed)
        self._carried = {sid: o for sid, o in self.outcomes.items() if sid not in affected}
        self.reviews = reviews
        self.scheduler = Scheduler(self.plan, self.options.jobs)
        self.outcomes = self.scheduler.outcomes
        self.progress = Progress(self.plan)
        self.context_steps = {}
        self._prepared = {}
        self._reads = {}

    def _finish(self, forced: RunStatus | None, started: float, reason: str | None) -> RunReport:
        steps = self.recorder.every_outcome(self.plan.order, self.outcomes, self.progress, reason)
        status, exit_code = forced, 130
        if status is None:
            status, exit_code = run_status(steps, aborted=reason is not None)
        status, exit_code = settle(self.plan, self.journal, self.run_id, steps, status, exit_code)
        if forced is None and self.budget_stopped:
            from .spend import OVER_BUDGET_EXIT

            # Stopped before a call that would have gone over a budget: nothing failed, the
            # next apply (with the budget raised) goes on from here.
            status, exit_code = RunStatus.INTERRUPTED, OVER_BUDGET_EXIT
        self.hasher.flush()
        self.recorder.run_finished(
            status,
            exit_code,
            reason,
            phase=self.current_phase,
            progress=self.progress.counts(),
            started=started,
        )
        return RunReport(
            self.run_id,
            self.plan.name,
            status,
            self.options.item,
            steps,
            exit_code,
            reason,
            inputs=dict(self.hasher.used),
            workspace=self.reuse.workspace_used,
            objects=self.reuse.objects_used,
            started_ns=int(started * 1e9),
            verified=self.objects.verified_signatures(),
            reads=self.reads,
            labels=self.recorder.labels,
        )

    # -- one step ------------------------------------------------------------------------------

    def _set_phase(self, step: CompiledStep) -> None:
        if step.phase and step.phase != self.current_phase:
            self.current_phase = step.phase
            self.recorder.phase_entered(step.phase)

    async def _step(self, step: CompiledStep) -> StepOutcome:
        carried = self._carried.get(step.id)
        if carried is not None:
            self._set_phase(step)
            return self._record_outcome(carried)
        emit = self.recorder.emit
        reused = self.options.reuse.get(step.id)
        if reused is not None and not self.scheduler.blocked(step):
            emit(EventType.STEP_SKIPPED, step.id, reason="cached", key=reused.key, reused=True)
            return self._record_outcome(reusedsteps.journal(self.recorder, as_cached(reused)))
        blocked = self.scheduler.blocked(step)
        if blocked is not None:
            emit(EventType.STEP_SKIPPED, step.id, reason=blocked)
            return self._record_outcome(StepOutcome(step.id, StepStatus.SKIPPED, reason=blocked))
        self._set_phase(step)
        started = time.perf_counter()
        try:
            if step.when is not None:
                with scoped(step.sandbox, step.network):
                    verdict = await step.when.evaluate(self._context(), root=self.plan.root)
                if verdict.error:  # a condition that cannot be evaluated is a failure, not a skip
                    reason = "when: " + "; ".join(verdict.reasons or ["cannot be evaluated"])
                    emit(EventType.STEP_FAILED, step.id, reason=reason)
                    return self._record_outcome(
                        StepOutcome(step.id, StepStatus.FAILED, reason=reason)
                    )
                if not verdict.passed:
                    reason = (
                        "when: " + "; ".join(verdict.reasons)
                        if verdict.reasons
                        else "when is false"
                    )
                    emit(EventType.STEP_SKIPPED, step.id, reason=reason)
                    return self._record_outcome(
                        StepOutcome(step.id, StepStatus.SKIPPED, reason=reason)
                    )
            if step.id in self._gates:
                from . import gatestep

                outcome = gatestep.run(self, step)
            else:
                outcome = await self._body(step)
            if self.batches.waiting(step.id):  # its elements have all asked: send them
                outcome = await batchrounds.send(
                    self.batches.open(),
                    self.recorder,
                    step,
                    outcome,
                    again=lambda: self._body(step),
                )
        except DiskFull:  # not this step's failure: the run stops (apply marks it interrupted)
            raise
        except (RunnerError, StepFailure) as exc:  # an expression that failed on real data
            outcome = self._failed(step, exc)
        outcome.duration_s = time.perf_counter() - started
        return self._record_outcome(outcome)

    async def _body(self, step: CompiledStep) -> StepOutcome:
        """The step's execution, or its for_each's: what a batch's answers run again."""
        if step.for_each is not None:
            return await self._for_each(step)
        return _plain(step, await self._execution(step, None, None, has_item=False))

    def _say_batch(self, step_id: str, text: str) -> None:
        self.recorder.emit(EventType.STEP_WAITING, step_id, None, where=text)

    def _failed(self, step: CompiledStep, exc: RunnerError | StepFailure) -> StepOutcome:
        reason = exc.reason if isinstance(exc, StepFailure) else str(exc)
        self.recorder.emit(EventType.STEP_FAILED, step.id, reason=reason)
        return StepOutcome(step.id, StepStatus.FAILED, reason=reason)

    def _step_now(self, step: CompiledStep) -> StepOutcome | None:
        """A plain step's outcome when it needs no waiting (its key's cached result, a failure
        of its arguments), else None: the scheduler then runs ``_step``, which goes on from the
        arguments and key worked out here. A cached step thus costs no task."""
        carried = self._carried.get(step.id)
        if carried is not None:
            self._set_phase(step)
            return self._record_outcome(carried)
        if step.when is not None or step.for_each is not None or step.id in self._gates:
            return None
        if self.scheduler.blocked(step) is not None:
            return None
        reused = self.options.reuse.get(step.id)
        if reused is not None:  # watch's last cycle answers it: no task, as a cached step
            self.recorder.emit(
                EventType.STEP_SKIPPED, step.id, reason="cached", key=reused.key, reused=True
            )
            return self._record_outcome(reusedsteps.journal(self.recorder, as_cached(reused)))
        self._set_phase(step)
        started = time.perf_counter()
        try:
            ready = self._prepare(step, None, None, has_item=False)
            if not isinstance(ready, ElementOutcome):
                self._prepared[step.id] = ready
                return None
            outcome = _plain(step, ready)
        except DiskFull:
            raise
        except (RunnerError, StepFailure) as exc:
            outcome = self._failed(step, exc)
        outcome.duration_s = time.perf_counter() - started
        return self._record_outcome(outcome)

    def _record_outcome(self, outcome: StepOutcome) -> StepOutcome:
        if outcome.id in self._reads:
            outcome.reads = frozenset(self._reads[outcome.id])
        self.progress.mark(outcome.id, outcome.status)
        self.recorder.progress(self.progress.counts)
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
        self.cached.fresh(step.id)  # a first run asks for no result element by element
        if step.id in self.edited_steps:  # an edit follows its item (state/overrides.py)
            self.reuse.present[step.id] = identities(items)
        from ...pipeline.labels import element_labels  # only a for_each needs it

        self.recorder.labels[step.id] = element_labels(step.label, items, self._context())
        elements = await run_elements(
            items,
            width=step.concurrency or len(items) or 1,
            prepare=lambda index, item: self._prepare(step, index, item, has_item=True),
            execute=lambda index, item, ready: self._execution(
                step, index, item, has_item=True, ready=ready
            ),
            flush=self.recorder.flush_events,
            inline=self._never_waits(step),
        )
        outcome = for_each_outcome(step.id, elements)
        self.recorder.emit(  # the elements had theirs; this says the step itself is done
            EventType.FOR_EACH_ENDED, step.id, status=outcome.status.value, elements=len(elements)
        )
        return outcome

    def _resolve(
        self, step: CompiledStep, extra: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyParts]:
        review = self.reviews.get(step.id)
        if review is not None:
            extra = {"feedback": list(review["feedback"]), "review": review, **extra}
        context, item = self._context(**extra), extra.get("item")
        env, has_item = self.env, "item" in extra
        args, parts = resolve(
            step,
            context,
            self.plan.root,
            self.hasher,
            env,
            review,
            item,
            has_item,
            recorded=lambda base: self.recorded.names(step.id, base),
        )
        if step.uses == "read" and not has_item:  # the files a glob matched, as the key has them
            self.reads[step.id] = list(parts.files)
        return args, parts

    def _contract(self, step: CompiledStep, extra: dict[str, Any], key: str) -> str | None:
        """What this execution's output is made under (see runner/state/overrides.py)."""
        if step.contract is None:
            return key
        try:
            value = ex.evaluate_value(step.contract, self._context(**extra))
        except RunnerError:
            return None  # missing or invalid: no edit can hold against it
        return None if value is None else str(value)

    async def _execution(
        self,
        step: CompiledStep,
        index: int | None,
        item: Any,
        *,
        has_item: bool,
        ready: ElementOutcome | _Ready | None = None,
    ) -> ElementOutcome:
        if ready is None:
            prepared = self._prepared.pop(step.id, None) if index is None else None
            ready = prepared or self._prepare(step, index, item, has_item=has_item)
        if isinstance(ready, ElementOutcome):
            return ready
        extra, el_index, args, parts, key, contract = ready
        if (
            step.cache is CachePolicy.USE
            and step.id not in self.options.force
            and self.remote is not None
            and step.type.shareable
            and not self.options.dry_run
        ):
            remote_hit = await self.reuse.remote_hit(
                self.remote, step, index, el_index, key, parts, contract
            )
            if remote_hit is not None:
                return remote_hit
        emit = self.recorder.emit
        if self.options.remote_only:
            # A record the remote holds but that was refused is said so, never as absent.
            why = self.remote.why_unused(key) if self.remote is not None else None
            reason = f"refused by the remote cache: {why}" if why else "not in the remote cache"
            emit(EventType.STEP_SKIPPED, step.id, index, reason=reason, key=key)
            return ElementOutcome(el_index, StepStatus.SKIPPED, key, reason=reason)
        if self.options.dry_run:
            return ElementOutcome(el_index, StepStatus.RAN, key, None, reason="would run")
        if self.plan.limits.max_steps or self.options.max_steps:
            limit = self.options.max_steps or self.plan.limits.max_steps or 0
            if self.executions_started >= limit:
                self.abort_reason = f"limit max_steps of {limit} reached"
                reason = self.abort_reason
                emit(EventType.STEP_FAILED, step.id, index, reason=reason)
                return ElementOutcome(el_index, StepStatus.FAILED, key, reason=reason)
        self.executions_started += 1
        async with self.scheduler.slot():
            return await self._run_attempts(
                step, index, el_index, args, parts, key, extra, contract
            )

    def _prepare(
        self, step: CompiledStep, index: int | None, item: Any, *, has_item: bool
    ) -> ElementOutcome | _Ready:
        """An execution's arguments and key, and its answer when one needs no waiting: a
        failure of its arguments, a user edit, the cached result."""
        extra: dict[str, Any] = {"item": item, "index": index} if has_item else {}
        el_index = -1 if index is None else index
        try:
            args, parts = self._resolve(step, extra)
            self._reads.setdefault(step.id, set()).update(parts.files)
            key = parts.key()  # arguments JSON cannot carry fail here, at their element
        except (StepFailure, ExpressionError, CanonicalError) as exc:
            reason = exc.reason if isinstance(exc, StepFailure) else str(exc)
            self.recorder.emit(EventType.STEP_FAILED, step.id, index, reason=reason)
            self.recorder.failure(step.id, el_index, None, reason, 0)
            return ElementOutcome(el_index, StepStatus.FAILED, reason=reason)
        contract = self._contract(step, extra, key)
        if step.id in self.edited_steps:
            edited = self.reuse.override(step, index, el_index, key, contract, parts.identity())
            if edited is not None:
                return edited
        if step.cache is CachePolicy.USE and step.id not in self.options.force:
            hit = self.cached.get((step.id, key), keep=index is None)  # an element asks once
            # A partial result (some iterations failed, a card drifted) is not a cache hit: the
            # next apply runs it again, and idempotency keys make the finished parts free.
            if hit is not None and hit.status == "completed" and self.reuse.usable(hit):
                return self.reuse.cached(step, index, el_index, key, hit, contract)
        return (extra, el_index, args, parts, key, contract)
