"""The shared HTTP layer: failures classified by what the backend may have done, over real sockets."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from runner.errors import Failure, ProviderError
from runner.providers._http import HttpProvider
from runner.providers.tracking import CallTracker
from tests.providers.servers import ProtocolServer, Reply


class Plain(HttpProvider):
    key = "plain"
    known_settings = frozenset({"base_url"})


def call(base_url: str, method: str = "POST", tracker: CallTracker | None = None) -> Any:
    provider = Plain(settings={"base_url": base_url, "timeout": 0.3})

    async def go() -> Any:
        async with provider.client() as client:
            return await provider.send(client, method, "/work", json={"a": 1}, tracker=tracker)

    return asyncio.run(go())


def failure_of(base_url: str, method: str = "POST", tracker: CallTracker | None = None) -> Any:
    with pytest.raises(ProviderError) as info:
        call(base_url, method, tracker)
    return info.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_was_never_sent_so_it_is_transient() -> None:
    tracker = CallTracker()
    error = failure_of(f"http://127.0.0.1:{free_port()}", tracker=tracker)
    assert error.failure is Failure.TRANSIENT and "connection failed (ConnectError" in error.message
    assert tracker.attempts == 0 and tracker.submitted_at is None


def test_a_post_sent_in_full_whose_reply_is_lost_may_have_been_executed() -> None:
    with ProtocolServer() as server:
        server.queue("POST", "/work", Reply(delay=0.6, body={}), Reply(drop=True))
        for says in ("(read timeout)", "connection failed (RemoteProtocolError"):
            tracker = CallTracker()
            error = failure_of(server.url, tracker=tracker)
            assert error.failure is Failure.MAYBE_EXECUTED and says in error.message
            assert "the backend may have completed (and billed) it" in error.message
            assert tracker.attempts == 1 and tracker.submitted_at is not None


def test_an_idempotent_request_whose_reply_is_lost_is_only_transient() -> None:
    with ProtocolServer() as server:
        server.queue("GET", "/work", Reply(delay=0.6, body={}))
        assert failure_of(server.url, "GET").failure is Failure.TRANSIENT


@pytest.mark.parametrize(
    ("reply", "failure", "says"),
    [
        (Reply(504, b"upstream timed out", "text/plain"), Failure.MAYBE_EXECUTED, "HTTP 504"),
        (Reply(503, {"error": {"message": "overloaded"}}), Failure.TRANSIENT, "overloaded"),
        (Reply(408, b"", "text/plain"), Failure.TRANSIENT, "HTTP 408"),
        (Reply(401, {"error": {"message": "bad key"}}), Failure.PERMANENT, "bad key"),
        # OpenAI's own reply when the account has no credit left: waiting does not help.
        (
            Reply(
                429,
                {
                    "error": {
                        "message": "You exceeded your current quota, please check your plan "
                        "and billing details.",
                        "type": "insufficient_quota",
                        "param": None,
                        "code": "insufficient_quota",
                    }
                },
            ),
            Failure.PERMANENT,
            "You exceeded your current quota",
        ),
    ],
    ids=["504", "503", "408", "401", "429-insufficient_quota"],
)
def test_status_replies_are_classified(reply: Reply, failure: Failure, says: str) -> None:
    with ProtocolServer() as server:
        server.queue("POST", "/work", reply)
        error = failure_of(server.url)
        assert error.failure is failure and error.status == reply.status
        assert says in error.message, error.message
        if failure is not Failure.TRANSIENT:
            assert error.retry_after is None


def test_retry_after_ms_is_read_before_retry_after() -> None:
    with ProtocolServer() as server:
        server.queue(
            "POST",
            "/work",
            Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after-ms": "1500"}),
            Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"}),
        )
        assert failure_of(server.url).retry_after == 1.5
        assert failure_of(server.url).retry_after == 2.0


@pytest.mark.parametrize(
    ("body", "content_type", "says"),
    [
        # AUTOMATIC1111's shape: the exception class labels the cause in `detail`.
        (
            {"error": "HTTPException", "detail": "Sampler not found", "body": "", "errors": ""},
            "application/json",
            "Sampler not found (HTTPException)",
        ),
        ({"detail": [{"loc": ["body", "x"], "msg": "field required"}]}, None, "field required"),
        ({"error": "model 'x' not found"}, None, "model 'x' not found"),
        (
            b"<html><head><title>502</title></head><body><h1>Bad Gateway</h1></body></html>",
            "text/html",
            "Bad Gateway",
        ),
    ],
    ids=["a1111", "fastapi", "ollama", "html"],
)
def test_the_backend_cause_is_kept_whatever_its_shape(
    body: Any, content_type: str | None, says: str
) -> None:
    with ProtocolServer() as server:
        server.queue("POST", "/work", Reply(400, body, content_type or "application/json"))
        message = failure_of(server.url).message
        assert says in message, message
        assert "<h1>" not in message
