"""An OpenAI-compatible server on 127.0.0.1 that measures load: calls in flight, the most ever in
flight at once, calls served and TCP connections accepted.

It answers POST /v1/chat/completions and POST /v1/images/generations in the shapes of OpenAI's
API reference (a ``chat.completion`` object; ``{created, data: [{b64_json}], usage}``) after
``delay`` seconds, as a backend busy generating would. ``refusing_url()`` gives the address of a
port nothing listens on: connecting to it is refused, as with a backend that is down.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (20, 120, 200)).save(out, format="PNG")
    return out.getvalue()


PNG_B64 = base64.b64encode(_png()).decode("ascii")


def refusing_url() -> str:
    """http://127.0.0.1:PORT of a port that was free a moment ago: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class LoadServer:
    """Use as a context manager; read ``max_in_flight``, ``served`` and ``connections``."""

    def __init__(self, delay: float = 0.05, *, port: int = 0) -> None:
        self.delay = delay
        self.port = port
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def _reply(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == "/v1/chat/completions":
            text = str(body["messages"][-1]["content"])
            return 200, {
                "id": "chatcmpl-load",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"ok {text}", "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
        if path == "/v1/images/generations":
            return 200, {
                "created": int(time.time()),
                "data": [{"b64_json": PNG_B64}],
                "usage": {"input_tokens": 5, "output_tokens": 10, "total_tokens": 15},
            }
        return 404, {
            "error": {"message": f"Invalid URL (POST {path})", "type": "invalid_request_error"}
        }

    def __enter__(self) -> LoadServer:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay)
                    status, reply = server._reply(self.path, body)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                        server.served += 1
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # 16 clients connecting at once must not hit the backlog

            def process_request(self, request: Any, client_address: Any) -> None:
                with server._lock:
                    server.connections += 1
                super().process_request(request, client_address)

        self._httpd = _Server(("127.0.0.1", self.port), _Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve(count: int, delay: float) -> None:
    """Run ``count`` servers until stdin closes (benchmarks run them apart from the client under
    test, so the two never share an interpreter lock). Their URLs go out as one JSON line; then
    each line in answers with one JSON line: ``stats`` -> [[most in flight, served], ...] per
    server, counting from the last ``reset``."""
    import sys

    servers = [LoadServer(delay=delay) for _ in range(count)]
    for s in servers:
        s.__enter__()
    try:
        print(json.dumps([s.url for s in servers]), flush=True)
        for line in sys.stdin:
            if line.strip() == "reset":
                for s in servers:
                    s.max_in_flight = s.served = 0
            print(json.dumps([[s.max_in_flight, s.served] for s in servers]), flush=True)
    finally:
        for s in servers:
            s.__exit__(None, None, None)


if __name__ == "__main__":
    import sys

    serve(int(sys.argv[1]), float(sys.argv[2]))
