"""Helpers for steps that make provider calls: redacted per-call logs, retries, lost replies.

Each call keyed by its idempotency key gets ``<key>.out`` (request and response summaries) and,
when an attempt failed, ``<key>.err`` (every failed attempt) in the run's log directory. Lines
are appended, so a call resumed later in the same run adds to the story instead of erasing it.

A call whose request went out and whose reply was lost (Failure.MAYBE_EXECUTED, or a process that
died while waiting: journaled in flight with a submission time) may have been completed and billed
by the backend. A synchronous provider's call is then not sent again by a later apply unless the
user says so: ``retry_uncertain = true`` in the provider's runner.toml section, or
``runner apply --retry-uncertain`` (``uncertain_reason`` says why, and how).
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import CallStatus, DiskFull, ProviderError
from ..source.redact import Redactor
from ..source.secretmask import mask
from .base import Provider
from .limits import admitted, calling, gated_call, waiting
from .pool import tell
from .retry import call_with_retries
from .tracking import CallTracker

T = TypeVar("T")

SAY_WAITS_FROM = 5.0  # seconds: a retry's wait at least this long is told on the console


class Event:
    """One thing that happened to a keyed call, stamped when it happened (``t``: now unless
    given). A plain class: a frozen dataclass cost ~0.45 ms to make, at every start-up."""

    __slots__ = ("data", "name", "t")

    def __init__(self, name: str, data: Mapping[str, Any], t: float | None = None) -> None:
        self.name = name
        self.data = data
        self.t = time.time() if t is None else t


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class CallLog:
    """Appends JSON-line summaries of one keyed call to ``<dir>/<key>.out`` and ``.err``.

    Events are stamped when they happen and formatted (redacted) when written, so a call that
    went well can write its request and response with one open, from a worker thread.
    """

    def __init__(self, directory: Path, key: str, redactor: Redactor) -> None:
        self.directory = directory
        self.out_path = directory / f"{key}.out"
        self.err_path = directory / f"{key}.err"
        self.redactor = redactor

    def line(self, event: Event) -> str:
        """The event as one redacted JSON line."""
        record = {
            "t": round(event.t, 3),
            "event": event.name,
            **self.redactor.redact_json(dict(event.data)),
        }
        # The provider's own secrets, then every other one runner knows
        # (runner/source/secretmask.py)
        return mask(self.redactor.redact(json.dumps(record, sort_keys=True, default=str)))

    def _append(self, path: Path, events: tuple[Event, ...]) -> None:
        text = "".join(f"{self.line(event)}\n" for event in events)
        try:
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(text)
            except FileNotFoundError:  # the run's first call: the directory is made once, here
                self.directory.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(text)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
            # not this call's failure: the run stops as for a full journal (see Journal)
            raise DiskFull(f"cannot write the call log {path.name[:16]}: {exc}") from exc

    def write_out(self, *events: Event) -> None:
        """Append events to ``<key>.out``."""
        self._append(self.out_path, events)

    def out(self, event: str, data: Mapping[str, Any]) -> None:
        self.write_out(Event(event, data))

    def err(self, event: str, data: Mapping[str, Any]) -> None:
        self._append(self.err_path, (Event(event, data),))


def error_summary(exc: ProviderError) -> dict[str, Any]:
    return {
        "kind": exc.kind,
        "status": exc.status,
        "retry_after": exc.retry_after,
        "message": exc.message,
    }


async def with_provider_retries(
    provider: Provider,
    fn: Callable[[], Awaitable[T]],
    *,
    on_retry: Callable[[int, ProviderError, float], object] | None = None,
    retry_uncertain: bool = False,
) -> T:
    """``fn()`` retried on transient errors as the provider's retry policy says.

    Maybe-executed errors are retried too when ``retry_uncertain`` (the run's flag) or the
    provider's ``retry_uncertain`` setting says the user accepts paying twice.

    Each attempt holds one of the provider's ``max_concurrency`` permits (shared by the whole
    run); the caller's CPU slot is given back for as long as the calls and backoffs last.
    """
    policy = provider.retry_policy()

    def retrying(attempt: int, exc: ProviderError, delay: float) -> None:
        if delay >= SAY_WAITS_FROM:  # a long wait is said on the console, not only in the log
            wait = f"{round(delay, 1):g}"
            tell(f"{exc.message} (attempt {attempt}; retrying in {wait} s)")
        if on_retry is not None:
            on_retry(attempt, exc, delay)

    async def admitted_then() -> T:
        # Inside the provider's gate: a budget on real spend counts the call as in flight only
        # from here, and may hold it until the calls out before it have ended (spendguard.py).
        await admitted()
        return await fn()

    # The element's turn (calling) is given back before the CPU slot is taken again (waiting):
    # the next element's call goes out before this one waits for a slot to record its reply.
    async with waiting(), calling():
        return await call_with_retries(
            lambda: gated_call(provider, admitted_then),
            attempts=policy.attempts,
            base_delay=policy.base_delay,
            cap=policy.cap,
            on_retry=retrying,
            retry_uncertain=retry_uncertain or provider.retry_uncertain,
        )


def tracker(ledger: Any, key: str) -> CallTracker:
    """A CallTracker journaling each sent request and the remote job id of call ``key`` at once.

    ``ledger`` is the step's Ledger (steps.base), or None for a call nobody journals.
    """
    if ledger is None:
        return CallTracker()
    return CallTracker(
        on_sent=lambda: ledger.sent(key),
        on_remote=lambda job, durable: ledger.remote_id(key, job, durable=durable),
        settle=lambda: ledger.durable(stops=False),
    )


def cancelled_in_flight(
    ledger: Any, key: str, call: CallTracker | None, exc: asyncio.CancelledError
) -> None:
    """Journal call ``key``, cancelled (the step's timeout, a cancelled run) after its request
    went out, as maybe-executed: the backend may finish and bill it, so it is not sent again
    blindly (a job-queue provider re-attaches to it instead). The cancel's message says why."""
    if ledger is None or call is None or call.submitted_at is None:
        return  # never sent: nothing was done, a later attempt may send it
    why = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "the run was cancelled"
    ledger.fail(key, f"{why} while its request was in flight", CallStatus.MAYBE_EXECUTED.value)


def failed_status(exc: ProviderError) -> str:
    """The journal status of a call that failed with ``exc`` (a CallStatus value)."""
    return (CallStatus.MAYBE_EXECUTED if exc.maybe_executed else CallStatus.FAILED).value


def resend_hint(provider: Provider) -> str:
    return (
        f"to send it again anyway, set retry_uncertain = true in [providers.{provider.name}] "
        "of runner.toml or run: runner apply --retry-uncertain"
    )


def failure_reason(provider: Provider, exc: ProviderError) -> str:
    """The user's message for a failed call; a maybe-executed one says how to send it again."""
    return f"{exc.message}; {resend_hint(provider)}" if exc.maybe_executed else exc.message


def uncertain_reason(
    provider: Provider, key: str, record: Mapping[str, Any] | None, *, retry_uncertain: bool
) -> str | None:
    """Why call ``key`` must not be sent again (its earlier request may have been executed).

    None when it may be sent: never sent, failed before any work, the user accepts paying
    twice (``retry_uncertain`` from the command line, or the provider's setting), or the provider
    is a job queue (``remote_jobs``), which asks its backend about the journaled job instead.
    """
    if record is None or retry_uncertain or provider.retry_uncertain or provider.remote_jobs:
        return None
    status = record.get("status")
    if status == CallStatus.MAYBE_EXECUTED:
        cause = str(record.get("error") or "its reply was lost")
    elif status == CallStatus.IN_FLIGHT and record.get("submitted_at"):
        cause = "it was sent and the run stopped before its reply was recorded"
    else:
        return None
    submitted = record.get("submitted_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(submitted))) if submitted else ""
    sent = f"sent at {when}" if submitted else "sent before"
    return (
        f"call {key[:12]} was {sent} and may have been completed and billed by the backend "
        f"({cause}); it is not sent again: {resend_hint(provider)}"
    )


def jsonable(value: Any) -> Any:
    """A plain-JSON copy of backend metadata (anything exotic becomes its text)."""
    return json.loads(json.dumps(value, default=str))
