"""Retrying transient provider failures: exponential backoff with full jitter, Retry-After first.

Only a TRANSIENT ProviderError is retried; a PERMANENT one propagates at once, and so does a
MAYBE_EXECUTED one (the backend may have done and billed the work) unless the caller passes
``retry_uncertain`` because the user said so. A server's Retry-After is honoured up to
RETRY_AFTER_CAP seconds; asked to wait longer, the call gives up at once (the message says how
long the server asked for) rather than hold the run for that long.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import Failure, ProviderError

T = TypeVar("T")

RETRY_AFTER_CAP = 60.0  # seconds; the longest server-asked wait a run sits through

Sleep = Callable[[float], Awaitable[object]]
OnRetry = Callable[[int, ProviderError, float], object]


def backoff_delay(
    attempt: int, *, base_delay: float, cap: float, rng: random.Random | None = None
) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))] for the attempt that failed."""
    ceiling = min(cap, base_delay * (2 ** max(attempt - 1, 0)))
    return (rng or random).uniform(0.0, ceiling)


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    base_delay: float,
    cap: float,
    sleep: Sleep = asyncio.sleep,
    on_retry: OnRetry | None = None,
    rng: random.Random | None = None,
    retry_uncertain: bool = False,
) -> T:
    """Await ``fn()`` up to ``attempts`` times while it raises a transient ProviderError.

    The delay before attempt k+1 is the full-jitter backoff, or the server's Retry-After when
    that is longer (a server asking us to wait is never hurried; one asking for more than
    RETRY_AFTER_CAP ends the retries). ``on_retry(attempt, error, delay)`` is called before each
    sleep. The last error is re-raised when attempts run out. ``retry_uncertain`` also retries
    MAYBE_EXECUTED errors (the user accepted paying twice).
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 1
    while True:
        try:
            return await fn()
        except ProviderError as exc:
            again = exc.transient or (retry_uncertain and exc.failure is Failure.MAYBE_EXECUTED)
            if not again or attempt >= attempts:
                raise
            delay = backoff_delay(attempt, base_delay=base_delay, cap=cap, rng=rng)
            if exc.retry_after is not None:
                if exc.retry_after > RETRY_AFTER_CAP:
                    exc.message += (
                        f" (the server asked to retry after {exc.retry_after:.0f} s, more than "
                        f"the {RETRY_AFTER_CAP:.0f} s a run waits; the next apply tries again)"
                    )
                    exc.args = (exc.message,)
                    raise
                delay = max(delay, exc.retry_after)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            await sleep(delay)
            attempt += 1
