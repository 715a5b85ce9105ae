"""Small HTTP servers on 127.0.0.1 that speak the subset of each provider protocol we use.

Each server records every request (so tests can count calls) and can be told to answer the next
requests on a path with scripted replies (429 + Retry-After, 500, 400 with an error body, a slow
reply, malformed JSON, a wrong content type, a dropped connection) before speaking the protocol.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import io
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from PIL import Image


def png(colour: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (64, 48)) -> bytes:
    """A real PNG of one colour."""
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def colour_of(text: str) -> tuple[int, int, int]:
    h = hashlib.sha256(text.encode()).digest()
    return (h[0], h[1], h[2])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # bytes are sent as they are; anything else as JSON
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False  # close the connection without answering


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def parts(self) -> list[tuple[str, str | None, bytes]]:
        """(name, filename, data) of each multipart/form-data part."""
        return [(name, fn, data) for name, fn, _ct, data in self.parts_with_types()]

    def parts_with_types(self) -> list[tuple[str, str | None, str, bytes]]:
        """(name, filename, content type, data) of each multipart/form-data part."""
        head = f"Content-Type: {self.headers['content-type']}\r\n\r\n".encode()
        msg = BytesParser(policy=HTTP).parsebytes(head + self.body)
        out = []
        for part in msg.iter_parts():
            payload = part.get_payload(decode=True)
            out.append(
                (
                    str(part.get_param("name", header="content-disposition")),
                    part.get_filename(),
                    part.get_content_type(),
                    payload if isinstance(payload, bytes) else b"",
                )
            )
        return out


Handler = Callable[[Recorded], Reply]
# Called in the connection's thread once the handshake is done; returns when the socket closes.
SocketHandler = Callable[["WebSocketPeer", Recorded], None]


class ProtocolServer:
    """A threaded HTTP server with routes; use as a context manager.

    ``connections`` counts the TCP connections accepted (keep-alive reuse shows as fewer).
    """

    def __init__(self, *, port: int = 0, record: bool = True) -> None:
        self.port = port  # 0: any free port
        self.record = record  # False: keep no request (a benchmark's server)
        self.connections = 0
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.sockets: dict[str, SocketHandler] = {}  # path -> handler of a websocket there
        self.socket_requests: list[Recorded] = []  # websocket handshakes (not in requests)
        self.requests: list[Recorded] = []
        self._queued: dict[tuple[str, str], collections.deque[Reply]] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, re.compile(pattern + "$"), handler))

    def websocket(self, path: str, handler: SocketHandler) -> None:
        """Accept RFC 6455 websockets on GET ``path`` (the same port as the HTTP routes)."""
        self.sockets[path] = handler

    def queue(self, method: str, path: str, *replies: Reply) -> None:
        """Answer the next requests on ``method path`` with ``replies``, in order."""
        with self._lock:
            self._queued.setdefault((method, path), collections.deque()).extend(replies)

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and r.path == path)

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def _answer(self, rec: Recorded) -> Reply:
        with self._lock:
            if self.record:
                self.requests.append(rec)
            queued = self._queued.get((rec.method, rec.path))
            if queued:
                return queued.popleft()
        for method, pattern, handler in self.routes:
            if method == rec.method and pattern.match(rec.path):
                return handler(rec)
        return Reply(404, {"error": f"no route {rec.method} {rec.path}"})

    def __enter__(self) -> ProtocolServer:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The services' own servers send with Nagle off (uvicorn and aiohttp through
            # asyncio's transports, Go's net/http, nginx's tcp_nodelay): http.server leaves it
            # on, and a reply written as headers then body then waits ~40 ms for the client's
            # delayed ACK on every kept-alive connection, a delay no real backend adds.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                rec = Recorded(
                    self.command,
                    split.path,
                    parse_qs(split.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                upgrade = rec.headers.get("upgrade", "").lower() == "websocket"
                if upgrade and rec.method == "GET" and rec.path in server.sockets:
                    self.close_connection = True
                    with server._lock:
                        server.socket_requests.append(rec)
                    peer = WebSocketPeer.accept(self, rec)
                    try:
                        server.sockets[rec.path](peer, rec)
                    finally:
                        peer.drop()
                    return
                reply = server._answer(rec)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    return
                body = (
                    reply.body
                    if isinstance(reply.body, bytes)
                    else (json.dumps(reply.body).encode())
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    self.close_connection = True  # the client gave up (a timeout test)

            do_GET = _serve
            do_POST = _serve

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # many clients connecting at once must not hit the backlog

            def process_request(self, request: Any, client_address: Any) -> None:
                with server._lock:
                    server.connections += 1
                super().process_request(request, client_address)

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-reply is expected in timeout tests

        self._httpd = _Server(("127.0.0.1", self.port), _Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class WebSocketPeer:
    """The server end of one websocket (RFC 6455): unmasked frames out, masked frames in.

    ``send_text``/``send_bytes`` may be called from any thread; ``messages()`` yields the
    client's text messages (answering pings, ending at a close frame or EOF); ``drop()`` cuts
    the TCP connection without a close frame, as a network failure does.
    """

    MAGIC = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def accept(cls, handler: BaseHTTPRequestHandler, rec: Recorded) -> WebSocketPeer:
        key = rec.headers.get("sec-websocket-key", "").encode()
        accept = base64.b64encode(hashlib.sha1(key + cls.MAGIC).digest()).decode()
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        handler.end_headers()  # no extension offered by the client is accepted
        handler.wfile.flush()
        return cls(handler)

    def _frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, n])
        elif n < 1 << 16:
            head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
        with self._lock:
            if self.closed:
                return
            try:
                self._handler.wfile.write(head + payload)
            except OSError:
                self.closed = True

    def send_text(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def send_bytes(self, data: bytes) -> None:
        self._frame(0x2, data)

    def messages(self) -> Iterator[str]:
        read = self._handler.rfile.read
        while not self.closed:
            try:
                head = read(2)
                if len(head) < 2:
                    return
                opcode, n = head[0] & 0x0F, head[1] & 0x7F
                if n == 126:
                    n = int.from_bytes(read(2), "big")
                elif n == 127:
                    n = int.from_bytes(read(8), "big")
                mask = read(4) if head[1] & 0x80 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(read(n)))
            except (OSError, ValueError):
                return
            if opcode == 0x8:  # close: answer it, then the connection ends
                self._frame(0x8, data[:2])
                return
            if opcode == 0x9:
                self._frame(0xA, data)
            elif opcode == 0x1:
                yield data.decode(errors="replace")

    def drop(self) -> None:
        with self._lock:
            self.closed = True
        with contextlib.suppress(OSError):
            self._handler.connection.shutdown(socket.SHUT_RDWR)


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.partition("x")
    return int(w), int(h)
