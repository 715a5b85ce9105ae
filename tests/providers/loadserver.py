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
from typing import Any

from PIL import Image

from .servers import ProtocolServer, Recorded, Reply


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


class LoadServer(ProtocolServer):
    """Use as a context manager; read ``max_in_flight``, ``served`` and ``connections``."""

    def __init__(self, delay: float = 0.05, *, port: int = 0) -> None:
        super().__init__(port=port, record=False)
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0
        self._load = threading.Lock()
        self.route("POST", "/v1/chat/completions", self._busy(self._chat))
        self.route("POST", "/v1/images/generations", self._busy(self._image))
        self.route("POST", "/.*", self._unknown)

    def _busy(self, reply: Any) -> Any:
        """``reply`` after ``delay`` seconds, counted in flight meanwhile."""

        def handler(rec: Recorded) -> Reply:
            with self._load:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                time.sleep(self.delay)
                answer: Reply = reply(json.loads(rec.body or b"{}"))
                return answer
            finally:
                with self._load:
                    self.in_flight -= 1
                    self.served += 1

        return handler

    @staticmethod
    def _chat(body: dict[str, Any]) -> Reply:
        text = str(body["messages"][-1]["content"])
        return Reply(
            body={
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
        )

    @staticmethod
    def _image(body: dict[str, Any]) -> Reply:
        return Reply(
            body={
                "created": int(time.time()),
                "data": [{"b64_json": PNG_B64}],
                "usage": {"input_tokens": 5, "output_tokens": 10, "total_tokens": 15},
            }
        )

    @staticmethod
    def _unknown(rec: Recorded) -> Reply:
        message = f"Invalid URL (POST {rec.path})"
        return Reply(404, {"error": {"message": message, "type": "invalid_request_error"}})


def serve(count: int, delay: float) -> None:
    """Run ``count`` servers until stdin closes (benchmarks run them apart from the client under
    test, so the two never share an interpreter lock). Their URLs go out as one JSON line; then
    each line in answers with one JSON line: ``stats`` -> [[most in flight, served], ...] per
    server, counting from the last ``reset``; ``cpu`` -> this process's CPU seconds (user +
    system, every thread) so far."""
    import resource
    import sys

    servers = [LoadServer(delay=delay) for _ in range(count)]
    for s in servers:
        s.__enter__()
    try:
        print(json.dumps([s.url for s in servers]), flush=True)
        for line in sys.stdin:
            if line.strip() == "cpu":
                used = resource.getrusage(resource.RUSAGE_SELF)
                print(json.dumps(used.ru_utime + used.ru_stime), flush=True)
                continue
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
