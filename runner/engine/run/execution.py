"""One execution run for real, on the coordinator's side: an edit kept before the step writes
again, the journal row that says it started, its attempts with their checks and feedback
(attempts.py), and the pass recorded: objects measured, the result journaled and pushed to a
remote cache, token use counted. The Interpreter (interpreter.py) is an ``Executions``: it
decides that an execution runs; this is how it runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...errors import StepFailure, StoreError
from ...expr.commandscope import CommandScope, command_scope
from ...pipeline.compiler import CompiledStep, Plan
from ...state.journal import Journal
from ...state.objects import ObjectStore
from ...steps.base import ResultStatus, StepContext, StepEnv, StepResult
from . import attempts
from .events import EventType
from .executors import Executor
from .keys import KeyParts
from .options import ApplyOptions
from .outcomes import ElementOutcome, StepStatus
from .recorded import RecordedReads
from .recorder import JournalLedger, Recorder
from .reuse import Reuse

if TYPE_CHECKING:
    from .remote_link import RemoteLink  # (imported by apply only when a remote is configured)
    from .spend import RunSpend  # (imported at a run's first provider call)

# The journal key of a result not kept for reuse: no key a lookup asks for starts so (keys are
# hex digests), and `runs show` still shows which key the run worked out.
UNKEPT = "unkept:"


class Executions:
    """The part of the Interpreter that runs an execution; the Interpreter sets these."""

    plan: Plan
    journal: Journal
    objects: ObjectStore
    env: StepEnv
    run_id: str
    options: ApplyOptions
    recorder: Recorder
    reuse: Reuse
    recorded: RecordedReads
    reviews: dict[str, dict[str, Any]]
    context_steps: dict[str, dict[str, Any]]
    executor: Executor | None
    remote: RemoteLink | None
    tokens_used: int
    abort_reason: str | None
    _kept: dict[tuple[str, int], dict[str, str]]
    # The run's real spend and budgets: made on the first call (spend.py); budget_stopped once
    # a call over a budget was refused (the run ends interrupted, exit 9).
    _spend: RunSpend | None = None
    budget_stopped: bool = False

    def spend(self) -> RunSpend:
        """The run's spend tracker, made at its first provider call (a run of shell steps
        never reads the price table)."""
        if self._spend is None:
            from .spend import run_spend

            providers = self.env.providers

            def settings_of(name: str) -> dict[str, Any]:
                got = providers.get(name) if providers is not None else None
                return dict(getattr(got, "settings", {}) or {})

            self._spend = run_spend(
                directory=self.plan.directory,
                pipeline=self.plan.file.name,
                max_cost=self.options.max_cost,
                pipeline_limit=self.plan.limits.max_cost,
                journal=self.journal,
                settings_of=settings_of,
                on_stop=self._over_budget,
            )
        return self._spend

    def _over_budget(self, why: str) -> None:
        """A call over a budget was refused: no step starts after it, and the run says why."""
        self.budget_stopped = True
        if self.abort_reason is None:
            self.abort_reason = why

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

    def _never_waits(self, step: CompiledStep) -> bool:
        """Whether an execution of ``step`` runs from start to end without a wait: a
        predictable body (no provider, files or objects) in this process, tried once, without
        checks (a check may wait on a command) or a mark for a body not safe to repeat."""
        return (
            step.type.predictable
            and self.executor is None
            and step.retries == 0
            and not step.checks
            and step.repeat_safe
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
        contract: str | None,
    ) -> ElementOutcome:
        kept, refused = self.reuse.keep_before_rerun(step, index, args)
        if refused is not None:
            self.recorder.emit(EventType.STEP_FAILED, step.id, index, reason=refused)
            self.recorder.failure(step.id, el_index, key, refused, 0)
            return ElementOutcome(el_index, StepStatus.FAILED, key, reason=refused)
        # A body that never waits has its row held, written whole as it ends (in the group of
        # rows written together), before any row of its dependents: there is no moment at
        # which the row saying it runs could be read. Any other's is written now, so `runs
        # show` lists it before its dependents' rows, as it started before them.
        hold = not kept and self._never_waits(step)
        exec_id = self.recorder.started(step.id, el_index, key, parts, contract, hold=hold)
        if kept:  # referenced at once, so no gc collects the kept bytes whatever happens next
            self._kept[(step.id, el_index)] = kept
            self.recorder.kept_edits(exec_id, kept)
        # A revision's reviewer input is the first attempt's feedback.
        review = self.reviews.get(step.id)
        review_feedback: list[str] = list(review["feedback"]) if review else []
        if review is not None:
            extra = {**extra, "review": review}

        def context(attempt: int, feedback: list[str], check_round: int) -> StepContext:
            return StepContext(
                env=self.env,
                run_id=self.run_id,
                step_id=step.id,
                element=index,
                attempt=attempt,
                feedback=feedback,
                check_round=check_round,
                review=review_feedback,
                ledger=JournalLedger(self.journal, self.run_id, step.id, self.spend),
                log=self.recorder.logger(step.id, index),
                waiting=self.recorder.waiter(step.id, index),
                sandbox=step.sandbox,
                network=step.network,
            )

        def evaluate(attempt: int, feedback: list[str]) -> dict[str, Any]:
            ctx = self._context(**{**extra, "feedback": feedback, "attempt": attempt})
            args: dict[str, Any] = step.type.evaluate(step.args, ctx)
            return args

        async def checks(result: StepResult, attempt: int) -> list[str]:
            if not step.checks:
                return []  # (most steps: no scope to make)
            # An exec check reads what the key names and what the step wrote, nothing else.
            files = (*parts.files, *step.type.produces(args))
            scope = command_scope.set(CommandScope(step.sandbox, step.network, files))
            try:
                return await self._checks(step, result, extra, attempt)
            finally:
                command_scope.reset(scope)

        done = await attempts.attempt(
            step,
            index,
            el_index,
            key,
            args,
            exec_id=exec_id,
            review_feedback=review_feedback,
            context=context,
            evaluate=evaluate,
            checks=checks,
            executor=self.executor,
            recorder=self.recorder,
            forced=step.id in self.options.force,
        )
        if isinstance(done, ElementOutcome):
            return done
        # An input that changed while the body ran: the result is what the command made now,
        # used by this run, but not from the bytes the key names, so never reused for them.
        moved = self.reuse.hasher.changed(
            self.plan.root, parts.predicted(), frozenset(step.type.produces(args))
        )
        by_key = contract == key
        reads: tuple[str, tuple[str, ...]] | None = None
        if step.type.records_reads:  # keyed by what the body read (recorded.py)
            settled, moved_read = self.recorded.settle(
                step.id, parts, done.result, self.plan.root, self.reuse.hasher
            )
            moved = moved or moved_read
            reads = (settled.base(), settled.recorded or ())  # shared with the result
            if settled.key() != key:  # it read other files than predicted: its row follows
                key = settled.key()
                self.recorder.rekeyed(exec_id, key, settled, contract=by_key)
        return self._passed(
            step, index, el_index, exec_id, key, done, moved=moved, by_key=by_key, reads=reads
        )

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
        done: attempts.Passed,
        *,
        moved: str | None = None,
        by_key: bool = True,
        reads: tuple[str, tuple[str, ...]] | None = None,
    ) -> ElementOutcome:
        """A pass recorded. ``moved``: an input that changed while the body ran; the row is
        then journaled under a key no lookup matches, and nothing is pushed to a remote; a
        contract that was the key (``by_key``: the step has no `contract:`) goes with it, so
        that no hand edit of this result is taken for the key's inputs either. ``reads``:
        (base key, names) of a body that recorded its reads, pushed with the result."""
        result, attempt = done.result, done.attempt
        kept = self._kept.pop((step.id, el_index), None)
        if kept:
            result.report = {**(result.report or {}), "edited_outputs_kept": kept}
        if moved is not None:
            note = (
                f"input {moved} changed while the step ran: its result is used in this run, "
                "not kept for reuse"
            )
            result.report = {**(result.report or {}), "not_kept": note}
            label = step.id if index is None else f"{step.id}[{index}]"
            self.recorder.emit_warning(f"{label}: {note}")
        digests = set(result.artifacts) | set(result.files.values())
        self.reuse.objects_used.update(result.artifacts)
        self.reuse.workspace_used.update(result.files)
        sizes = {}
        for d in digests:
            try:
                sizes[d] = self.objects.size(d)
            except StoreError:
                raise StepFailure(
                    f"step type '{step.uses}' referenced object {d[:12]} it never stored"
                ) from None
        status = "partial" if result.status is ResultStatus.PARTIAL else "completed"
        duration = time.perf_counter() - done.t0
        # Where the body ran (a Dask worker), journaled with the execution and its event.
        where = getattr(self.executor, "where", {}).pop((step.id, index), None)
        # A plain step's record is written once its dependents started; an element's now.
        self.recorder.passed(
            exec_id,
            result,
            sizes,
            output_text=done.output_text,
            status=status,
            attempts=attempt,
            duration=duration,
            defer=index is None,
            worker=where,
            key=None if moved is None else f"{UNKEPT}{key}",
            contract=f"{UNKEPT}{key}" if moved is not None and by_key else None,
        )
        shared = moved is None and step.type.shareable
        if self.remote is not None and status == "completed" and shared:
            self.remote.push(
                key=key,
                step_type=f"{step.uses}@{step.type.version}",
                output=result.output,
                artifacts=sizes,
                files=dict(result.files),
                report=result.report,
                reads=reads,
            )
        if result.usage:
            from ...providers.usage import tokens_used  # (only a step that reported usage)

            self.tokens_used += tokens_used(result.usage)  # (cache tokens are the prompt's)
            budget = self.options.token_budget or self.plan.limits.token_budget
            if budget is not None and self.tokens_used > budget:
                self.abort_reason = (
                    f"limit token_budget of {budget} reached ({self.tokens_used} tokens used)"
                )
        if result.status is ResultStatus.PARTIAL:
            self.recorder.emit(
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
        self.recorder.emit(
            EventType.STEP_PASSED,
            step.id,
            index,
            key=key,
            duration_s=round(duration, 6),
            attempts=attempt,
            **({"worker": where} if where else {}),
        )
        return ElementOutcome(el_index, StepStatus.RAN, key, result.output, duration_s=duration)
