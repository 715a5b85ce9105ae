"""The error replies every HTTP provider must classify, and one routine that checks them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from runner.errors import Failure, ProviderError
from runner.providers.retry import call_with_retries

from .servers import ProtocolServer, Reply

TIMEOUT = 0.3  # seconds; the provider under test is configured with it


@dataclass(frozen=True)
class Fault:
    name: str
    reply: Reply
    failure: Failure
    says: str  # must appear in the user-facing message

    def __str__(self) -> str:
        return self.name


FAULTS = [
    Fault(
        "429",
        Reply(
            429,
            {"error": {"message": "Rate limit reached for requests"}},
            headers={"Retry-After": "3"},
        ),
        Failure.TRANSIENT,
        "HTTP 429: Rate limit reached for requests",
    ),
    Fault(
        "500",
        Reply(500, {"error": "upstream exploded"}),
        Failure.TRANSIENT,
        "HTTP 500: upstream exploded",
    ),
    Fault(
        "400",
        Reply(400, {"error": {"message": "Invalid value for size"}}),
        Failure.PERMANENT,
        "HTTP 400: Invalid value for size",
    ),
    # The request went out in full and the reply never came: the backend may have done the work.
    Fault(
        "slow",
        Reply(delay=TIMEOUT * 2, body={}),
        Failure.MAYBE_EXECUTED,
        f"no reply within {TIMEOUT} s (read timeout); the request was sent",
    ),
    Fault(
        "502-gateway",
        Reply(502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
        Failure.MAYBE_EXECUTED,
        "HTTP 502: 502 Bad Gateway",
    ),
    Fault("malformed-json", Reply(body=b'{"data": ['), Failure.PERMANENT, "malformed JSON reply"),
    # Numbers JSON has not (Python's json reads them; the journal and every --json reader
    # would then carry them), nesting that exhausts the stack, and a lone surrogate escape
    # (no text and no journal can hold it): the reply is refused, permanently, saying why.
    *(
        Fault(
            f"not-json-{name}",
            Reply(body=body),
            Failure.PERMANENT,
            f"malformed JSON reply ({says}",
        )
        for name, body, says in [
            ("nan", b'{"created": 1, "data": [{"score": NaN}]}', "NaN is not a JSON number"),
            ("infinity", b'{"score": Infinity}', "Infinity is not a JSON number"),
            ("-infinity", b'{"score": -Infinity}', "-Infinity is not a JSON number"),
            ("overflow", b'{"score": 1e400}', "the number 1e400 is out of range"),
            ("deep", b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
            ("lone-surrogate", b'{"text": "a\\ud800b"}', "a string holds a lone UTF-16"),
        ]
    ),
    Fault(
        "content-type",
        Reply(body=b"<html>oops</html>", content_type="text/html"),
        Failure.PERMANENT,
        "expected a JSON reply, got content type 'text/html'",
    ),
    Fault(
        "connection-reset",
        Reply(drop=True),
        Failure.MAYBE_EXECUTED,
        "connection failed (RemoteProtocolError: Server disconnected",
    ),
]


def check_fault(
    server: ProtocolServer,
    method: str,
    path: str,
    call: Callable[[], Awaitable[Any]],
    fault: Fault,
) -> None:
    """Queue ``fault`` once on ``method path`` and check classification, retries and message."""
    server.queue(method, path, fault.reply)
    before = server.count(method, path)
    slept: list[float] = []
    seen: list[ProviderError] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    def attempt(attempts: int) -> Any:
        return asyncio.run(
            call_with_retries(
                call,
                attempts=attempts,
                base_delay=0,
                cap=0,
                sleep=sleep,
                on_retry=lambda _a, exc, _d: seen.append(exc),
            )
        )

    if fault.failure is Failure.TRANSIENT:
        assert attempt(2) is not None
        assert server.count(method, path) - before == 2  # failed once, then succeeded
        [error] = seen
        assert error.transient
        if fault.name == "429":
            assert error.status == 429 and slept == [3.0]  # Retry-After honoured
    else:
        with pytest.raises(ProviderError) as info:
            attempt(3)
        error = info.value
        assert error.failure is fault.failure
        assert server.count(method, path) - before == 1  # never retried
    assert fault.says in error.message, error.message
