"""A step in batch mode, once its elements have all asked: its batches made, waited for (with
the provider's ``batch_wait``) and its elements run again on their answers; and a cancelled
run's batches cancelled at the service. The interpreter calls these; the desk (batchdesk.py)
keeps the batches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...errors import ProviderError
from ...pipeline.compiler import CompiledStep
from ...state.journal import Journal
from .events import EventType
from .outcomes import StepOutcome, StepStatus
from .recorder import Recorder

if TYPE_CHECKING:
    from .batchdesk import BatchDesk, LineBudget


class RunBatches:
    """The run's batches as its steps see them (steps.base.BatchAccess): the desk is made when a
    step first asks a batch for an answer, or asks whether one holds a call while the journal
    holds batch requests. A run without batch mode never makes it, nor loads batchdesk.py and
    the providers' batch API (~2 ms of a start-up when every run made one)."""

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        *,
        say: Callable[[str, str], None],
        budget: Callable[[], LineBudget],
    ) -> None:
        self._journal, self._run_id, self._say, self._budget = journal, run_id, say, budget
        self.desk: BatchDesk | None = None
        self._none_held: bool | None = None  # the journal held no batch request at first look

    def open(self) -> BatchDesk:
        """The desk (batchdesk.BatchDesk), made now if it was not."""
        if self.desk is None:
            from .batchdesk import BatchDesk

            self.desk = BatchDesk(self._journal, self._run_id, say=self._say, budget=self._budget)
        return self.desk

    async def answer(
        self, *, step_id: str, provider: Any, api: Any, key: str, endpoint: str, body: Any
    ) -> Any:
        return await self.open().answer(
            step_id=step_id, provider=provider, api=api, key=key, endpoint=endpoint, body=body
        )

    def holds(self, key: str) -> bool:
        if self.desk is None:
            if self._none_held is None:  # (the desk reads what it holds once too)
                from ...state.batchbook import holds_any

                self._none_held = not holds_any(self._journal)
            if self._none_held:
                return False
        return self.open().holds(key)

    def waiting(self, step_id: str) -> bool:
        """Whether ``step_id`` left requests to send or batches to finish making."""
        return self.desk is not None and self.desk.waiting(step_id)

    def stop(self) -> None:
        if self.desk is not None:
            self.desk.stop()


# Batches an apply makes and waits for per step (a first one, then follow-ups for failed checks)
MAX_BATCH_ROUNDS = 8


async def send(
    desk: BatchDesk,
    recorder: Recorder,
    step: CompiledStep,
    outcome: StepOutcome,
    *,
    again: Callable[[], Awaitable[StepOutcome]],
) -> StepOutcome:
    """Make the batches ``step``'s elements queued; a service that refuses fails the step
    (its batch rows stay: the next apply goes on from them, nothing made twice). With the
    provider's ``batch_wait``, wait for them and run the step ``again`` once they ended (a
    follow-up batch, for checks failed with feedback, goes round again)."""
    for _ in range(MAX_BATCH_ROUNDS):
        try:
            await desk.flush(step.id)
        except ProviderError as exc:
            reason = f"its batch could not be sent: {exc.message}"
            recorder.emit(EventType.STEP_FAILED, step.id, reason=reason)
            return StepOutcome(step.id, StepStatus.FAILED, reason=reason, elements=outcome.elements)
        if not await desk.settle(step.id):
            return waiting(outcome, desk.progress(step.id))
        outcome = await again()
        if not desk.waiting(step.id):
            return outcome
    return outcome


def waiting(outcome: StepOutcome, where: str) -> StepOutcome:
    """``outcome`` of a step whose calls wait in batches, its reason saying where they stand
    (its elements said only "queued" before the batches were made)."""
    if outcome.status is StepStatus.AWAITING_BATCH and where:
        count = sum(e.status is StepStatus.AWAITING_BATCH for e in outcome.elements or [])
        total = len(outcome.elements or [])
        outcome.reason = f"{count} of {total} elements wait: {where}" if total else where
    return outcome


async def cancel(desk: BatchDesk, recorder: Recorder, providers: Any) -> None:
    """`runner runs cancel` of a run waiting on its batches cancels them at the service too
    (a Ctrl-C does not: the batches go on, and the next apply collects them)."""
    if providers is None:
        return
    from ...providers.batchapi import batch_api_of

    def api(name: str) -> tuple[Any, Any]:
        provider = providers.get(name)
        return provider, batch_api_of(provider)

    try:
        asked = await desk.cancel(api)
    except ProviderError as exc:
        recorder.emit_warning(f"the run's batches could not be cancelled: {exc.message}")
        return
    if asked:
        recorder.emit_warning(f"cancelled {asked} batch(es) at the provider")
