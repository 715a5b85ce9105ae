"""A backend that trickles its reply (one byte a second) is bounded by the call's ``timeout``.

httpx's read timeout bounds each wait for bytes, so a server sending one byte a second never
trips it: with ``timeout = 10`` an apply waited five minutes for a 300-byte reply. The timeout
bounds the whole request; the call then ends at about its timeout, and since its body went out
in full, it is maybe-executed (journaled so by the ledger, not sent again), as any timeout after
the request was sent.
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from runner.errors import Failure, ProviderError
from runner.providers._http import HttpProvider
from runner.providers.tracking import CallTracker
from tests.conftest import Project

TIMEOUT = 2.0
BODY = b'{"id": "c1", "choices": []}' + b" " * 300  # 300+ s at one byte a second


@contextmanager
def trickling_server() -> Iterator[tuple[str, list[float]]]:
    """A loopback HTTP server that reads each request in full, sends its headers at once, then
    its body one byte a second. Yields its URL and the times it accepted connections."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()
    accepted: list[float] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
            )
            for byte in BODY:
                if stop.wait(1.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:  # the client gave up: what the test wants
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(time.monotonic())
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


class Plain(HttpProvider):
    key = "plain"
    known_settings = frozenset({"base_url"})


def test_a_trickled_reply_ends_at_the_timeout_and_is_maybe_executed() -> None:
    with trickling_server() as (url, _accepted):
        provider = Plain(settings={"base_url": url, "timeout": TIMEOUT})
        tracker = CallTracker()

        async def go() -> Any:
            async with provider.client() as client:
                return await provider.send(client, "POST", "/work", json={"a": 1}, tracker=tracker)

        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            asyncio.run(go())
        took = time.monotonic() - started
    assert TIMEOUT - 0.1 <= took < TIMEOUT + 1.5, took
    error = info.value
    assert error.failure is Failure.MAYBE_EXECUTED, error.message
    assert f"no complete reply within {TIMEOUT} s" in error.message
    assert "the backend may have completed (and billed) it" in error.message
    assert tracker.attempts == 1 and tracker.submitted_at is not None


def test_an_idempotent_trickled_request_is_transient_and_bounded_too() -> None:
    with trickling_server() as (url, _accepted):
        provider = Plain(settings={"base_url": url, "timeout": TIMEOUT})

        async def go() -> Any:
            async with provider.client() as client:
                return await provider.send(client, "GET", "/status")

        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            asyncio.run(go())
        took = time.monotonic() - started
    assert took < TIMEOUT + 1.5, took
    assert info.value.failure is Failure.TRANSIENT, info.value.message


def test_an_apply_against_a_trickling_backend_ends_at_the_timeout_and_journals_maybe_executed(
    project: Project,
) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: trickle
        steps:
          ask:
            uses: llm
            retries: 0
            with: {prompt: "say hi"}
            check: ["${{ output.text | length > 0 }}"]
        """,
    )
    with trickling_server() as (url, accepted):
        project.write(
            "runner.toml",
            textwrap.dedent(
                f"""\
                [general]
                default_provider = "openai"

                [providers.openai]
                base_url = "{url}/v1"
                model = "test-chat"
                timeout = {TIMEOUT}
                max_retries = 3
                retry_base_delay = 0
                """
            ),
        )
        started = time.monotonic()
        doc = project.apply()
        took = time.monotonic() - started
        assert doc["_exit"] != 0
        # One request, never sent again: its body went out in full, so it may have been billed.
        assert len(accepted) == 1, (accepted, doc)
        assert took < TIMEOUT + 6, took
        show = project.cli("runs", "show", doc["run"]["id"], "--json").json
        (call,) = show["calls"]
        assert call["outcome"] == "maybe_executed" and call["submitted"], call
        assert f"no complete reply within {TIMEOUT} s" in call["error"]
        # The next apply does not send it again either.
        again = project.apply()
        assert again["_exit"] != 0 and len(accepted) == 1


def test_an_a1111_render_with_a_trickled_progress_reply_ends_near_its_timeout() -> None:
    """A1111's render has no read timeout of its own: /sdapi/v1/progress says whether to keep
    waiting. A progress reply trickled a byte a second held that watch for minutes."""
    from runner.providers import ImageRequest, create

    with trickling_server() as (url, _accepted):
        provider = create("a1111", {"base_url": url, "timeout": TIMEOUT, "poll_interval": 0.2})
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            asyncio.run(provider.generate_image(ImageRequest(prompt="x", size=(8, 8), seed=1)))
        took = time.monotonic() - started
    assert took < 2 * TIMEOUT + 1.5, took
    assert info.value.failure is Failure.MAYBE_EXECUTED, info.value.message
    assert "/sdapi/v1/progress showed no work" in info.value.message
