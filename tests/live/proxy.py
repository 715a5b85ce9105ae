"""A counting TCP proxy in front of a live server: how many requests reached it, how many at once.

It forwards bytes untouched (the server's replies are its own), counts each request line that
matches ``watch`` on its way in, and keeps the largest number of connections open at once. A
client with a keep-alive pool (httpx) opens a new connection only when every open one is busy,
so that number is how many calls it had in flight at most: which the llama.cpp server (one
generation at a time) cannot tell itself.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from types import TracebackType
from typing import Any


class CountingProxy:
    def __init__(self, upstream_port: int, watch: bytes = b"POST /v1/chat/completions") -> None:
        self.upstream_port, self.watch = upstream_port, watch
        self.requests = 0
        self.inbound = bytearray()  # every byte sent to the server, in arrival order
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop = True
        self._server.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            client.close()  # the server is down: so is the proxy, for this connection
            return
        upstream.settimeout(None)
        with self._lock:
            self.connections += 1
            self.open += 1
            self.max_open = max(self.max_open, self.open)
        back = threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True)
        back.start()
        self._pipe(client, upstream, True)
        back.join(timeout=600)
        with self._lock:
            self.open -= 1

    def _pipe(self, src: socket.socket, dst: socket.socket, inbound: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if inbound:
                    with self._lock:
                        self.requests += data.count(self.watch)
                        self.inbound += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            src.close()

    def wait_requests(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.requests < n and time.monotonic() < deadline:
            time.sleep(0.02)

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the watched requests, in order (for calls sent one at a time)."""
        out = []
        for chunk in bytes(self.inbound).split(self.watch)[1:]:
            body = chunk.split(b"\r\n\r\n", 1)[1].split(b"GET /", 1)[0]
            out.append(json.loads(body))
        return out
