"""One attempt of a step body, on the executor's side of the seam.

The body gets plain data -- its resolved arguments (their input files' digests are in the key
already), a StepContext with the object store -- and runs where the executor puts it (this
process, or a Dask worker: executors.py). What it returns or raises comes back as a BodyRun:
plain data the coordinator journals and decides on (retry, fail, check). A body never reaches
the journal or the scheduler.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable
from typing import Any

from ...errors import DiskFull, InvalidPipeline, ProviderError, RunnerError, StepFailure
from ...state.canonical import CanonicalError
from ...state.records import dumps
from ...steps.base import StepContext, StepResult, StepType
from .executors import BodyLost, Executor
from .once import claim


class BodyRun:
    """What one attempt came to: ``result`` when the body returned, else why it failed. (A
    plain class: as a dataclass it cost ~0.35 ms of every start-up to make.)"""

    __slots__ = (
        "check", "failure", "output_text", "reason", "result", "retryable", "traceback",
        "uncertain",
    )  # fmt: skip

    def __init__(
        self,
        result: StepResult | None = None,
        reason: str = "",
        retryable: bool = False,
        check: bool | None = False,
        failure: StepFailure | None = None,
        traceback: str | None = None,
        output_text: str = "",
        uncertain: bool = False,
    ) -> None:
        self.result = result
        self.reason = reason
        self.retryable = retryable
        # Whether the failure is a check's (only `check:` rules get retries with feedback).
        # None: the failure says nothing about checks (a bug in the step type).
        self.check = check
        self.failure = failure  # a StepFailure the body raised (it may carry output)
        self.traceback = traceback  # a bug in the step type: where it happened
        self.output_text = output_text  # the result's output as JSON, as the body returned it
        # Whether the body may still have begun, or still run, with no outcome seen: a timeout
        # (on a worker it runs on), a task the executor lost. A body not safe to repeat keeps
        # its mark.
        self.uncertain = uncertain


def timeout_reason(timeout: float | None) -> str:
    return f"the step's timeout fired after {timeout:g}s"


async def within(coro: Awaitable[StepResult], timeout: float) -> StepResult:
    """``coro`` bounded by the step's ``timeout``, as ``asyncio.wait_for`` bounds it, except that
    the body is cancelled with the reason as the CancelledError's message: a paid call in flight
    journals it (the call may have been executed: providers/calls.py ``cancelled_in_flight``).

    Raises TimeoutError when the timeout fired and the body ended cancelled."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait((task,))  # unwound (its journal writes made) before the run goes on
        raise
    if not done:
        task.cancel(timeout_reason(timeout))
        await asyncio.wait((task,))
        if task.cancelled():
            raise TimeoutError
    return task.result()  # the body's result or exception, even one it raised while cancelled


async def run_body(
    executor: Executor | None,
    step_type: StepType,
    ctx: StepContext,
    args: dict[str, Any],
    *,
    uses: str,
    timeout: float | None,
    resources: Any,
) -> BodyRun:
    """Run the body once through ``executor`` (None: in this event loop) within ``timeout``.

    Raises DiskFull (not this step's failure: the run stops) and CancelledError."""
    try:
        remote = executor is not None and executor.name == "dask" and step_type.runs_anywhere
        if ctx.once is not None and not remote:  # a worker marks it there (dask_worker.py)
            claim(ctx.once, ctx.run_id, ctx.step_id, ctx.element)
        coro = (
            executor.run(step_type, ctx, args, resources=resources)
            if executor is not None
            else step_type.run(ctx, args)
        )
        result: StepResult = await (within(coro, timeout) if timeout else coro)
    except TimeoutError:
        return BodyRun(reason=timeout_reason(timeout), retryable=True, uncertain=True)
    except StepFailure as exc:
        # A check failure raised by the step body itself (e.g. compliance) is deterministic.
        return BodyRun(
            reason=exc.reason,
            retryable=exc.retryable,
            check=exc.check,
            failure=exc,
            uncertain=isinstance(exc, BodyLost),
        )
    except ProviderError as exc:
        return BodyRun(reason=f"{exc.kind} provider error: {exc.message}", retryable=exc.transient)
    except InvalidPipeline as exc:
        return BodyRun(reason=str(exc))
    except DiskFull:
        raise
    except RunnerError as exc:
        return BodyRun(reason=str(exc))
    except Exception as exc:  # a bug in a step type: recorded with its traceback
        tb = traceback.format_exc(limit=8)
        reason = f"internal error in step type '{uses}': {type(exc).__name__}: {exc}"
        return BodyRun(reason=reason, check=None, traceback=tb)
    try:  # what the journal cannot hold fails this step, not the run's record of it
        text = dumps(result.output)
    except CanonicalError as exc:
        return BodyRun(reason=f"step type '{uses}' gave an output that cannot be recorded: {exc}")
    return BodyRun(result=result, output_text=text)
