"""A loopback Ollama server written from ollama/ollama (docs/api.md, docs/api/*.mdx,
server/routes.go).

Facts carried over: POST /api/chat and /api/generate stream by default (``stream`` omitted means
true): the reply is ``application/x-ndjson``, one JSON object a line, the last with ``done: true``,
``done_reason`` and the counters (prompt_eval_count, eval_count, durations); ``"stream": false``
gives one ``application/json`` object. Errors are ``{"error": "..."}``: 400 "missing request body"
or a JSON decode error, 404 "model 'NAME' not found", 400 "\\"NAME\\" does not support chat" (or
generate). An error after the stream began is one more NDJSON line ``{"error": "..."}`` with the
status already 200 (streamResponse). Models with the image capability are refused on
/api/generate: 400 "image generation models are not currently supported".

Experimental image builds answered /api/generate with ``image`` (or ``images``) for width/height
requests; ``experimental_images=True`` serves that older shape for models named ``img*``.
Server-side counters: ``generations`` counts completed generations.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from .servers import ProtocolServer, Recorded, Reply, b64, colour_of, png

NDJSON = "application/x-ndjson"
MODELS = {"llama-test": {"completion"}, "llava-test": {"completion", "vision"}}
IMAGE_MODELS = ("img", "x/z-image")  # name prefixes of models with the image capability


def created_at() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


class OllamaServer(ProtocolServer):
    """/api/chat and /api/generate as Ollama serves them."""

    def __init__(self, *, experimental_images: bool = False, fail_mid_stream: bool = False) -> None:
        super().__init__()
        self.experimental_images = experimental_images
        self.fail_mid_stream = fail_mid_stream  # the model errors after two streamed chunks
        self.generations = 0
        self._lock = threading.Lock()
        self.route("POST", "/api/chat", self._chat)
        self.route("POST", "/api/generate", self._generate)

    def _body(self, rec: Recorded) -> tuple[dict[str, Any] | None, Reply | None]:
        if not rec.body:
            return None, Reply(400, {"error": "missing request body"})
        try:
            body = json.loads(rec.body)
        except ValueError as exc:
            return None, Reply(400, {"error": f"invalid character in JSON: {exc}"})
        return body, None

    def _known(self, model: str, endpoint: str) -> Reply | None:
        if model.startswith(IMAGE_MODELS):
            if endpoint == "chat":
                return Reply(400, {"error": f'"{model}" does not support chat'})
            if not self.experimental_images:
                return Reply(400, {"error": "image generation models are not currently supported"})
            return None
        if model not in MODELS and not model.startswith("llama"):
            return Reply(404, {"error": f"model '{model}' not found"})
        return None

    def _reply(self, body: dict[str, Any], key: str, text: str, extra: dict[str, Any]) -> Reply:
        """One JSON object, or NDJSON chunks when the request streams (the default)."""
        model = body["model"]
        final = {
            "model": model,
            "created_at": created_at(),
            "done": True,
            "done_reason": "stop",
            "total_duration": 1_000_000,
            "load_duration": 100_000,
            "prompt_eval_count": 21,
            "prompt_eval_duration": 200_000,
            "eval_count": 5,
            "eval_duration": 700_000,
            **extra,
        }
        with self._lock:
            self.generations += 1
        if body.get("stream", True) is False:
            return Reply(body={**final, **self._content(key, text)})
        words = text.split(" ")
        chunks = [" ".join(words[: len(words) // 2]), " " + " ".join(words[len(words) // 2 :])]
        lines = [
            {"model": model, "created_at": created_at(), **self._content(key, c), "done": False}
            for c in chunks
            if c.strip()
        ]
        if self.fail_mid_stream:
            lines = [*lines, {"error": "an error was encountered while running the model"}]
        else:
            lines.append({**final, **self._content(key, "")})
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return Reply(body=data, content_type=NDJSON)

    @staticmethod
    def _content(key: str, text: str) -> dict[str, Any]:
        return (
            {"message": {"role": "assistant", "content": text}}
            if key == "message"
            else {"response": text}
        )

    def _chat(self, rec: Recorded) -> Reply:
        body, bad = self._body(rec)
        if bad is not None or body is None:
            return bad or Reply(400, {"error": "missing request body"})
        refused = self._known(str(body.get("model", "")), "chat")
        if refused is not None:
            return refused
        last = body["messages"][-1]["content"]
        text = json.dumps({"echo": last}) if body.get("format") else f"ollama says: {last}"
        return self._reply(body, "message", text, {})

    def _generate(self, rec: Recorded) -> Reply:
        body, bad = self._body(rec)
        if bad is not None or body is None:
            return bad or Reply(400, {"error": "missing request body"})
        model = str(body.get("model", ""))
        refused = self._known(model, "generate")
        if refused is not None:
            return refused
        if model.startswith(IMAGE_MODELS):
            image = png(colour_of(body["prompt"]), (body["width"], body["height"]))
            shape = {"images": [b64(image)]} if "multi" in model else {"image": b64(image)}
            with self._lock:
                self.generations += 1
            return Reply(body={"model": model, "created_at": created_at(), "done": True, **shape})
        return self._reply(body, "response", f"generated: {body['prompt']}", {})
