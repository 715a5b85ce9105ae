"""call_with_retries: full-jitter backoff, Retry-After honoured, only transient errors retried."""

from __future__ import annotations

import asyncio
import random

import pytest

from runner.errors import Failure, ProviderError
from runner.providers.retry import RETRY_AFTER_CAP, backoff_delay, call_with_retries


class Flaky:
    def __init__(self, errors: list[ProviderError]) -> None:
        self.errors = errors
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def run(fn: Flaky, attempts: int, **kw: object) -> tuple[object, list[float]]:
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)

    async def go() -> object:
        return await call_with_retries(fn, attempts=attempts, sleep=sleep, **kw)  # type: ignore[arg-type]

    return asyncio.run(go()), slept


def transient(retry_after: float | None = None) -> ProviderError:
    return ProviderError("busy", transient=True, status=503, retry_after=retry_after)


def test_retries_transient_errors_with_capped_jittered_delays() -> None:
    fn = Flaky([transient(), transient(), transient()])
    result, slept = run(fn, 4, base_delay=1.0, cap=2.5, rng=random.Random(1))
    assert result == "ok" and fn.calls == 4
    assert len(slept) == 3
    for attempt, d in enumerate(slept, start=1):
        assert 0 <= d <= min(2.5, 1.0 * 2 ** (attempt - 1))


def test_retry_after_is_a_lower_bound_on_the_delay() -> None:
    fn = Flaky([transient(retry_after=7.0)])
    result, slept = run(fn, 2, base_delay=0.1, cap=0.2)
    assert result == "ok" and slept == [7.0]


def test_permanent_errors_are_raised_at_once() -> None:
    fn = Flaky([ProviderError("bad request", transient=False, status=400)])
    with pytest.raises(ProviderError, match="bad request"):
        run(fn, 5, base_delay=0, cap=0)
    assert fn.calls == 1


def test_the_last_error_is_raised_when_attempts_run_out() -> None:
    errors = [transient(), ProviderError("still busy", transient=True)]
    fn = Flaky(errors)
    seen: list[tuple[int, str]] = []
    with pytest.raises(ProviderError, match="still busy"):
        run(fn, 2, base_delay=0, cap=0, on_retry=lambda a, e, d: seen.append((a, e.message)))
    assert fn.calls == 2 and seen == [(1, "busy")]


def test_other_exceptions_are_not_retried() -> None:
    calls = 0

    async def boom() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("bug")

    with pytest.raises(KeyError):
        asyncio.run(call_with_retries(boom, attempts=3, base_delay=0, cap=0))
    assert calls == 1


def test_backoff_grows_and_is_capped() -> None:
    rng = random.Random(0)
    draws = [backoff_delay(8, base_delay=1, cap=3, rng=rng) for _ in range(200)]
    assert max(draws) <= 3 and max(draws) > 2


def test_maybe_executed_errors_are_not_sent_again_unless_the_user_accepts_it() -> None:
    def lost() -> ProviderError:
        return ProviderError("read timeout after sending", maybe_executed=True)

    fn = Flaky([lost()])
    with pytest.raises(ProviderError) as info:
        run(fn, 5, base_delay=0, cap=0)
    assert fn.calls == 1 and info.value.failure is Failure.MAYBE_EXECUTED
    assert not info.value.transient and info.value.kind == "maybe_executed"

    fn = Flaky([lost()])
    result, _ = run(fn, 5, base_delay=0, cap=0, retry_uncertain=True)
    assert result == "ok" and fn.calls == 2


def test_a_retry_after_longer_than_the_cap_ends_the_retries_saying_so() -> None:
    fn = Flaky([transient(retry_after=RETRY_AFTER_CAP + 1)])
    with pytest.raises(ProviderError) as info:
        run(fn, 5, base_delay=0, cap=0)
    assert fn.calls == 1
    assert f"asked to retry after {RETRY_AFTER_CAP + 1:.0f} s" in str(info.value)
    fn = Flaky([transient(retry_after=RETRY_AFTER_CAP)])
    assert run(fn, 2, base_delay=0, cap=0) == ("ok", [RETRY_AFTER_CAP])


def test_an_error_is_not_both_transient_and_maybe_executed() -> None:
    with pytest.raises(ValueError):
        ProviderError("x", transient=True, maybe_executed=True)
