"""An execution's attempts: its body run (stepbody.py), its checks, and retries with feedback.

Only a failed check is feedback: a failed ``check:`` (or a reply the step type itself refuses,
such as JSON that breaks the step's schema) is retried at once with the reasons, which the next
attempt's request carries. A transient failure (a 5xx, a dropped connection, the step's timeout)
is retried after a jittered backoff with the very same request: the same call key, so the
ledger's rules hold (a request that may have been executed is not sent again blindly), and no
error text ever reaches a model as if the user had written it. What the attempts came to is
journaled through the recorder: a failure here, a pass by the caller (it has more to do with it).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ...pipeline.compiler import CompiledStep
from ...steps.base import StepContext, StepResult
from . import once
from .events import EventType
from .executors import Executor
from .outcomes import ElementOutcome, StepStatus
from .recorder import Recorder
from .stepbody import run_body

if TYPE_CHECKING:
    from ...errors import StepFailure
    from ...providers.batchapi import BatchPending


class Passed(NamedTuple):
    """A step body's result that passed its checks, with the attempt that made it. (A
    NamedTuple: a dataclass cost ~0.2 ms of every start-up to make.)"""

    result: StepResult
    attempt: int
    t0: float  # perf_counter when the first attempt began
    output_text: str  # the output's JSON, encoded as the body returned it


def _in_batch(failure: StepFailure) -> BatchPending | None:
    """``failure`` when it says its call waits in a provider's batch (batch mode)."""
    from ...providers.batchapi import BatchPending  # (a run without batch mode never loads it)

    return failure if isinstance(failure, BatchPending) else None


async def attempt(
    step: CompiledStep,
    index: int | None,
    el_index: int,
    key: str,
    args: dict[str, Any],
    *,
    exec_id: int,
    review_feedback: list[str],
    context: Callable[[int, list[str], int], StepContext],
    evaluate: Callable[[int, list[str]], dict[str, Any]],
    checks: Callable[[StepResult, int], Awaitable[list[str]]],
    executor: Executor | None,
    recorder: Recorder,
    forced: bool = False,
) -> Passed | ElementOutcome:
    """Attempt ``step`` up to ``step.retries + 1`` times: the first attempt whose body returns
    and passes its checks, else the failed element (journaled). ``context(attempt, feedback,
    check_round)`` makes an attempt's StepContext, ``evaluate(attempt, feedback)`` its arguments
    after the first (``feedback``: the reviewer's words, then the last failed check's reasons),
    ``checks(result, attempt)`` the reasons its result fails the step's checks. A step not safe
    to repeat (``repeat_safe: false``) whose body began before and was never seen to end fails
    without running unless ``forced`` (engine/run/once.py)."""
    emit = recorder.emit
    feedback: list[str] = []  # the last failed check's reasons; nothing else is feedback
    check_round = 0
    reason = ""
    check_failure = False
    t0 = time.perf_counter()
    max_attempts = step.retries + 1
    n = 0
    failed_output: dict[str, Any] | None = None
    mark: Path | None = None
    for n in range(1, max_attempts + 1):
        emit(EventType.STEP_STARTED, step.id, index, attempt=n, key=key)
        if n > 1:
            args = evaluate(n, [*review_feedback, *feedback])
        ctx = context(n, list(feedback), check_round)
        if not step.repeat_safe:
            mark = once.mark_path(ctx.env.state_dir, key)
            # every attempt: one whose body's outcome was never seen (a timeout, a lost task)
            # left the mark, and a retry must not start the body again blindly
            before = once.seen(mark)
            asked = forced or ctx.env.retry_uncertain  # the ledger's rule for a lost reply
            if before is not None and not (asked and n == 1):
                reason = once.refusal(step.id, index, before)
                break
            once.clear(mark)
            ctx.once = str(mark)
            recorder.journal.commit()  # journaled as started before the body begins
        try:
            body = await run_body(
                executor,
                step.type,
                ctx,
                args,
                uses=step.uses,
                timeout=step.timeout,
                resources=step.resources,
            )
        except asyncio.CancelledError:
            recorder.cancelled(exec_id, n)
            raise  # a mark stays: nobody knows whether the body took effect
        pending = _in_batch(body.failure) if body.failure is not None else None
        if pending is not None:
            # Its call waits in a provider's batch: suspended, not failed (batchdesk.py); the
            # desk says where the batch stands, once per batch rather than per element.
            if mark is not None:
                once.clear(mark)
            recorder.awaiting_batch(
                exec_id, n, body.reason, time.perf_counter() - t0, call=pending.key
            )
            return ElementOutcome(
                el_index, StepStatus.AWAITING_BATCH, key, None, body.reason,
                duration_s=time.perf_counter() - t0,
            )  # fmt: skip
        seen_to_end = not body.uncertain and not isinstance(body.failure, once.NotRepeated)
        if mark is not None and seen_to_end:
            once.clear(mark)  # its outcome is back: a later attempt or apply may start it
        reason, retryable = body.reason, body.retryable
        if body.check is not None:
            check_failure = body.check
        if body.failure is not None:
            failed_output = body.failure.output
        if body.traceback is not None:
            emit(EventType.LOG, step.id, index, line=body.traceback)
        if body.result is not None:
            failed_checks = await checks(body.result, n)
            if not failed_checks:
                return Passed(body.result, n, t0, body.output_text)
            reason = "; ".join(failed_checks)
            retryable, check_failure = True, True
            feedback, check_round = failed_checks, check_round + 1
        elif body.check:  # the body refused its own result (a schema, a compliance check)
            feedback, check_round = [reason], check_round + 1
        if n < max_attempts and retryable:
            delay = (
                0.0 if check_failure else (min(30.0, 0.2 * 2 ** (n - 1)) * random.uniform(0.5, 1.0))
            )
            emit(
                EventType.STEP_RETRYING,
                step.id,
                index,
                attempt=n + 1,
                reason=reason,
                delay_s=round(delay, 3),
            )
            if delay:
                await asyncio.sleep(delay)
            continue
        break
    recorder.failed(exec_id, n, reason, time.perf_counter() - t0, failed_output)
    emit(EventType.STEP_FAILED, step.id, index, reason=reason, attempts=n, check=check_failure)
    return ElementOutcome(
        el_index,
        StepStatus.FAILED,
        key,
        failed_output,
        reason,
        check_failure,
        time.perf_counter() - t0,
    )
