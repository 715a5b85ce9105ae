"""Provider failures said for what they are (issue 40): a TLS/certificate failure at once, not
as a backend "down" after minutes of probing; a redirect with its Location, not as a "malformed
JSON reply". Real applies against loopback servers: one speaking TLS with a certificate no CA
signed, one answering every request with a redirect.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import Project

PIPELINE = """\
runner: 1
name: said
steps:
  ask:
    uses: llm
    retries: 0
    with: {prompt: "say hi"}
    check: ["${{ output.text | length > 0 }}"]
"""


def _toml(url: str) -> str:
    # max_wait: how long a pool waits for a backend said down; a TLS failure must not wait it
    return textwrap.dedent(
        f"""\
        [general]
        default_provider = "openai"

        [providers.openai]
        base_url = "{url}/v1"
        model = "test-chat"
        timeout = 5
        max_wait = 20
        max_retries = 2
        retry_base_delay = 0
        """
    )


@contextmanager
def _server(
    reply: bytes, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[str, list[float]]]:
    """A loopback server answering each connection's first request with ``reply`` (over TLS
    when ``tls``); yields its URL and the times it accepted a connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()
    accepted: list[float] = []

    def serve(conn: socket.socket) -> None:
        try:
            if tls is not None:
                conn = tls.wrap_socket(conn, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            conn.sendall(reply)
        except (OSError, ssl.SSLError):
            return  # the client refused the handshake: what the TLS test wants
        finally:
            conn.close()

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
    scheme = "https" if tls is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _self_signed(tmp: Path) -> ssl.SSLContext:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_a_certificate_that_does_not_verify_is_said_at_once_not_probed_as_down(
    project: Project, tmp_path: Path
) -> None:
    project.write("pipeline.yaml", PIPELINE)
    with _server(b"HTTP/1.1 200 OK\r\n\r\n", _self_signed(tmp_path)) as (url, accepted):
        project.write("runner.toml", _toml(url))
        started = time.monotonic()
        doc = project.apply()
        took = time.monotonic() - started
    said = json.dumps(doc)
    assert doc["_exit"] != 0
    assert "TLS/certificate failure" in said and "CERTIFICATE_VERIFY_FAILED" in said, said
    assert "down" not in said, said
    assert took < 10, took  # not max_wait (20 s) of probing a backend that answers
    assert len(accepted) == 1, accepted  # said at once: not retried, not probed


def test_runner_providers_says_a_certificate_failure_not_down(
    project: Project, tmp_path: Path
) -> None:
    with _server(b"HTTP/1.1 200 OK\r\n\r\n", _self_signed(tmp_path)) as (url, _accepted):
        project.write("runner.toml", _toml(url))
        res = project.cli("providers", "--json")
    assert res.exit_code == 0, res.stderr
    (backend,) = [b for p in res.json["configured"] for b in p["backends"]]
    assert backend["health"] == "tls_failure", backend
    assert "CERTIFICATE_VERIFY_FAILED" in backend["error"], backend


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_said_with_its_location(project: Project, status: int) -> None:
    project.write("pipeline.yaml", PIPELINE)
    moved = "https://api.example.test/v2/chat/completions"
    reply = (
        f"HTTP/1.1 {status} Moved\r\nLocation: {moved}\r\nContent-Type: text/html\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n"
    ).encode()
    with _server(reply) as (url, _accepted):
        project.write("runner.toml", _toml(url))
        doc = project.apply()
    said = json.dumps(doc)
    assert doc["_exit"] != 0
    assert f"HTTP {status}: redirected to {moved}" in said, said
    assert "malformed JSON" not in said and "expected a JSON reply" not in said, said
