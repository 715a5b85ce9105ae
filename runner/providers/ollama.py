"""Ollama: chat and generate over its HTTP API, images for experimental image models.

Text: POST /api/chat {model, messages[{role, content, images[b64]}], format, options{temperature,
seed, num_predict}, stream: false} (or /api/generate when params.endpoint is "generate").
``params: {stream: true}`` is honoured: the reply is then NDJSON (one object a line, the last with
``done: true`` and the counters), read line by line; an ``{"error": ...}`` line after the stream
began fails the call with Ollama's message. ``timeout`` bounds the whole request, streamed or
not (_http.HttpProvider.send).
Images (experimental, marked so in ``runner providers``): POST /api/generate with width/height;
image models of the experimental builds answer with ``image`` or ``images``; current Ollama
refuses them ("image generation models are not currently supported"), which reaches the user.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..state.canonical import loads_strict
from ._http import HttpProvider, b64decode, b64encode, usage_ints
from ._httpx import httpx
from .base import Capabilities, ImageRequest, ImageResult, TextRequest, TextResult
from .honours import IMAGE_FIELDS, TEXT_FIELDS, Honours

_USAGE = {"prompt_eval_count": "prompt_tokens", "eval_count": "completion_tokens"}


# What Ollama's /api/chat and /api/generate read (its api/types.go), besides what runner sets
# itself (model, messages or prompt, format, images): `endpoint` is runner's own choice of the
# two. Unknown fields are ignored by the server.
_CHAT_FIELDS = frozenset(
    {
        "endpoint",
        "options",
        "stream",
        "keep_alive",
        "think",
        "tools",
        "raw",
        "suffix",
        "template",
        "context",
        "system",
    }
)
_IMAGE_FIELDS = frozenset({"options", "stream", "keep_alive", "steps"})
_OPTIONS = frozenset(
    {
        "num_keep",
        "seed",
        "num_predict",
        "top_k",
        "top_p",
        "min_p",
        "tfs_z",
        "typical_p",
        "repeat_last_n",
        "temperature",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "penalize_newline",
        "stop",
        "numa",
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "num_thread",
    }
)


class OllamaProvider(HttpProvider):
    """A local Ollama server (default http://127.0.0.1:11434)."""

    key: ClassVar[str] = "ollama"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "a local Ollama server (chat, generate, experimental images)"
    default_base_url: ClassVar[str] = "http://127.0.0.1:11434"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image", "text"}),
        supports_seed=True,
        supports_reference_image=True,
        max_concurrency=1,  # one local GPU: parallel calls only queue up
        accepts_idempotency_key=False,
        experimental=frozenset({"image"}),
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "model", "image_model", "options", "keep_alive"}
    )
    defaults: ClassVar[dict[str, Any]] = {"model": "llama3.2"}

    def honours(self, kind: str) -> Honours:
        # Ollama reads the fields of its request types by name and drops the others without a
        # word (Go's JSON decoding), and drops an unknown option with a log line on the server:
        # a sampling setting anywhere but options, or misspelt there, would be paid for and do
        # nothing.
        top = _CHAT_FIELDS if kind == "text" else _IMAGE_FIELDS
        return Honours(
            fields=TEXT_FIELDS if kind == "text" else IMAGE_FIELDS,
            params=top,
            params_why="sampling settings go under params.options (e.g. options: {top_p: 0.9})",
            nested={"options": _OPTIONS},
            nested_why="Ollama's options are listed in its API (num_ctx, top_k, top_p, ...)",
        )

    def _options(self, extra: dict[str, Any]) -> dict[str, Any]:
        base = self.settings.get("options", {})
        return {**(base if isinstance(base, dict) else {}), **extra}

    def _common(self, body: dict[str, Any]) -> dict[str, Any]:
        if "keep_alive" in self.settings:
            body["keep_alive"] = self.settings["keep_alive"]
        return body

    async def generate_text(self, request: TextRequest) -> TextResult:
        model = request.model or str(self.settings["model"])
        params = dict(request.params)
        endpoint = params.pop("endpoint", "chat")
        options: dict[str, Any] = {}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.seed is not None:
            options["seed"] = request.seed
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        options = self._options({**params.pop("options", {}), **options})
        body: dict[str, Any] = {"model": model, "stream": False, "options": options, **params}
        if request.json_schema is not None:
            body["format"] = request.json_schema
        elif request.format == "json":
            body["format"] = "json"
        if endpoint == "generate":
            url = "/api/generate"
            system = [
                str(m.get("content", "")) for m in request.messages if m.get("role") == "system"
            ]
            rest = [m for m in request.messages if m.get("role") != "system"]
            body["prompt"] = "\n\n".join(str(m.get("content", "")) for m in rest)
            if system:
                body["system"] = "\n\n".join(system)
            images = [b64encode(i) for m in rest for i in m.get("images") or []]
            if images:
                body["images"] = images
        else:
            url = "/api/chat"
            body["messages"] = [self._message(m) for m in request.messages]
        async with self.client(request.timeout) as client:
            resp = await self.send(
                client, "POST", url, json=self._common(body), tracker=request.tracker
            )
        reply = self._reply(resp, url)
        if endpoint == "generate":
            text = reply.get("response")
        else:
            message = reply.get("message")
            text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            raise self.bad_reply(f"POST {url}", "no reply text")
        meta = {
            "model": reply.get("model", model),
            "seed": request.seed,
            "done_reason": reply.get("done_reason"),
        }
        return TextResult(text=text, metadata=meta, usage=usage_ints(reply, _USAGE))

    def _reply(self, resp: httpx.Response, url: str) -> dict[str, Any]:
        """The reply object: the JSON one, or the NDJSON stream folded into one like it."""
        if "ndjson" not in resp.headers.get("Content-Type", "").lower():
            return self.json_of(resp)
        folded: dict[str, Any] = {}
        text: list[str] = []
        for number, line in enumerate(resp.text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                chunk = loads_strict(line)
            except ValueError as exc:
                raise self.bad_reply(
                    f"POST {url}", f"stream line {number} is not JSON ({exc})"
                ) from None
            if not isinstance(chunk, dict):
                raise self.bad_reply(f"POST {url}", f"stream line {number} is not an object")
            if chunk.get("error"):  # the model failed after the reply began (status still 200)
                raise self.error(f"POST {url}: the stream failed: {chunk['error']}", transient=True)
            message = chunk.get("message")
            piece = message.get("content") if isinstance(message, dict) else chunk.get("response")
            if isinstance(piece, str):
                text.append(piece)
            folded.update(chunk)
        if folded.get("done") is not True:
            raise self.error(f"POST {url}: the stream ended before done", transient=True)
        joined = "".join(text)
        if isinstance(folded.get("message"), dict):
            folded["message"] = {**folded["message"], "content": joined}
        else:
            folded["response"] = joined
        return folded

    @staticmethod
    def _message(message: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"role": message["role"], "content": message.get("content", "")}
        images = message.get("images") or []
        if images:
            out["images"] = [b64encode(i) for i in images]
        return out

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        model = str(
            request.params.get("model")
            or self.settings.get("image_model")
            or self.settings["model"]
        )
        params = {k: v for k, v in request.params.items() if k != "model"}
        options = self._options(dict(params.pop("options", {})))
        if request.seed is not None:
            options["seed"] = request.seed
        body: dict[str, Any] = {
            "model": model,
            "prompt": request.prompt,
            "stream": False,
            "width": request.size[0],
            "height": request.size[1],
            "options": options,
            **params,
        }
        if request.negative_prompt:
            body["negative_prompt"] = request.negative_prompt
        if request.references:
            body["images"] = [b64encode(r) for r in request.references]
        url = "/api/generate"
        async with self.client(request.timeout) as client:
            resp = await self.send(
                client, "POST", url, json=self._common(body), tracker=request.tracker
            )
        reply = self._reply(resp, url)
        raw = reply.get("image")
        if raw is None and isinstance(reply.get("images"), list) and reply["images"]:
            raw = reply["images"][0]
        if raw is None:
            raise self.bad_reply(
                f"POST {url}", "no image or images[] in the reply (is the model an image model?)"
            )
        try:
            image = b64decode(raw, "image")
        except ValueError as exc:
            raise self.bad_reply(f"POST {url}", str(exc)) from None
        meta = {"model": reply.get("model", model), "seed": request.seed, "revised_prompt": None}
        return ImageResult(image=image, metadata=meta, usage=usage_ints(reply, _USAGE))
