"""Retrying transient provider failures: exponential backoff with full jitter, Retry-After first.

Only ProviderError with ``transient=True`` is retried; anything else propagates at once, so a bad
request or a bug is never paid for twice.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import ProviderError

T = TypeVar("T")

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
) -> T:
    """Await ``fn()`` up to ``attempts`` times while it raises a transient ProviderError.

    The delay before attempt k+1 is the full-jitter backoff, or the server's Retry-After when
    that is longer (a server asking us to wait is never hurried). ``on_retry(attempt, error,
    delay)`` is called before each sleep. The last error is re-raised when attempts run out.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 1
    while True:
        try:
            return await fn()
        except ProviderError as exc:
            if not exc.transient or attempt >= attempts:
                raise
            delay = backoff_delay(attempt, base_delay=base_delay, cap=cap, rng=rng)
            if exc.retry_after is not None:
                delay = max(delay, exc.retry_after)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            await sleep(delay)
            attempt += 1
