"""Anthropic's Messages API (POST {base}/messages): text replies, images in, structured output.

The protocol points, as Anthropic's API reference states them (docs.claude.com/en/api,
anthropics/anthropic-sdk-python's generated types):

- Every request carries ``x-api-key`` and ``anthropic-version`` (setting ``anthropic_version``,
  default 2023-06-01); ``max_tokens`` is required, so a step without one gets the provider's
  ``max_tokens`` setting (default 1024).
- System text is the top-level ``system`` field, not a message: the step's system messages go
  there as text blocks. ``user``/``assistant`` messages keep their order; a message's images go
  before its text as ``{type: image, source: {type: base64, media_type, data}}`` blocks (PNG,
  JPEG, GIF or WebP).
- Prompt caching: with ``prompt_cache = true`` (the default) the last system block carries
  ``cache_control: {type: ephemeral}``, so a system prompt shared by many calls (a for_each) is
  written to the cache once and read by the rest. A prefix shorter than the model's minimum is
  simply not cached (no error, no charge). Cache writes and reads come back in the usage as
  ``cache_creation_input_tokens`` / ``cache_read_input_tokens``, which ``input_tokens`` does not
  include.
- Structured output is tool use: the step's ``schema`` becomes the ``input_schema`` of one tool
  the model is told to call (``tool_choice: {type: tool, name}``); its ``input`` is the reply.
  ``input_schema`` must be an object, so any other schema is wrapped in ``{value: ...}`` and
  unwrapped from the reply. ``format: json`` without a schema has no API form: it is asked for
  in a system block after the cached prefix.
- Replies: ``content`` blocks (``text``, ``tool_use``), ``stop_reason`` (``end_turn``,
  ``max_tokens``, ``stop_sequence``, ``tool_use``, ``pause_turn``, ``refusal``) and
  ``stop_sequence``; a ``refusal`` is returned as one (metadata ``refusal``).
- Errors are ``{type: "error", error: {type, message}, request_id}``: 400
  ``invalid_request_error``, 401 ``authentication_error``, 402 ``billing_error``, 403
  ``permission_error``, 404 ``not_found_error``, 413 ``request_too_large``, 429
  ``rate_limit_error`` (with ``retry-after``), 500 ``api_error``, 529 ``overloaded_error``.
  _http.HttpProvider classifies them by status: 429, 500 and 529 are transient (``retry-after``
  honoured), the other 4xx permanent, a lost reply maybe-executed. The API takes no
  idempotency key, so a lost reply is never sent again blindly.

``params`` are body fields of the service's own (``stop_sequences``, ``top_p``, ``top_k``,
``metadata``, ``service_tier``...); ``stream`` is refused (one JSON reply is read).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from ._http import HttpProvider, b64encode
from .base import Capabilities, ProviderConfigError, TextRequest, TextResult
from .honours import Honours
from .openai import image_type
from .usage import text_usage

if TYPE_CHECKING:
    from .anthropic_batch import AnthropicBatches

API_VERSION = "2023-06-01"
TOOL_NAME = "reply"
JSON_INSTRUCTION = "Reply with only a JSON value: no prose and no code fence around it."
# The image types the Messages API reads (anything else is refused by the service).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class AnthropicProvider(HttpProvider):
    """Anthropic's Messages API over HTTP (the service, or anything that speaks it)."""

    key: ClassVar[str] = "anthropic"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Anthropic's Messages API (Claude)"
    default_base_url: ClassVar[str] = "https://api.anthropic.com/v1"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"text"}),
        supports_seed=False,  # the Messages API takes no seed
        supports_reference_image=False,
        max_concurrency=4,
        accepts_idempotency_key=False,  # not in the API reference: never relied upon
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {
            "base_url",
            "model",
            "api_key_env",
            "anthropic_version",
            "max_tokens",
            "prompt_cache",
            "params",
        }
    )
    # batch mode: how long an apply waits on a running batch, and a smaller split
    operational_settings: ClassVar[frozenset[str]] = HttpProvider.operational_settings | {
        "batch_wait",
        "batch_max_requests",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "model": "claude-sonnet-4-5",
        "api_key_env": "ANTHROPIC_API_KEY",
        "max_tokens": 1024,
        "prompt_cache": True,
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.int_setting("max_tokens", 1024, minimum=1)
        if not isinstance(self.settings.get("prompt_cache", True), bool):
            raise ProviderConfigError(f"provider '{self.name}': prompt_cache must be true/false")
        params = self.settings.get("params", {})
        if not isinstance(params, dict):
            raise ProviderConfigError(f"provider '{self.name}': params must be a table")

    def headers(self) -> dict[str, str]:
        h = super().headers()
        h["anthropic-version"] = self.str_setting("anthropic_version", API_VERSION)
        key = self.secrets.get("api_key")
        if key:
            h["x-api-key"] = key
        return h

    def honours(self, kind: str) -> Honours:
        return Honours(
            fields=frozenset({"temperature", "max_tokens", "format", "schema", "images"}),
            missing={
                "seed": "Anthropic's Messages API takes no seed: a reply cannot be pinned; "
                "set temperature: 0 for the steadiest replies",
            },
            refused_params={
                "stream": "the anthropic provider reads one JSON reply, not a stream of "
                "server-sent events: drop params.stream",
                "tools": "runner reads the reply's text (or, with schema:, its one tool call): "
                "other tools' calls would be paid for and dropped",
                "tool_choice": "set by runner from the step's schema",
                "system": "give system text as a system message of the step",
                "messages": "give messages in the step's messages: or prompt:",
            },
        )

    def batch_api(self) -> AnthropicBatches:
        """Its Message Batches endpoints (batch mode: docs/providers.md)."""
        from .anthropic_batch import AnthropicBatches

        return AnthropicBatches(self)

    # --- the request ------------------------------------------------------------------------

    def body(self, request: TextRequest) -> tuple[dict[str, Any], bool]:
        """The request body for ``request``, and whether the schema was wrapped in ``value``."""
        system: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            if m.get("role") == "system":
                system.append({"type": "text", "text": str(m.get("content", ""))})
            else:
                messages.append(self._message(m))
        if system and self.settings.get("prompt_cache", True):
            # The breakpoint after the stable prefix: each element of a for_each sends the same
            # system text, so the first call writes it and the rest read it at the cache rate.
            system[-1]["cache_control"] = {"type": "ephemeral"}
        base = self.settings.get("params", {})
        body: dict[str, Any] = {
            "model": request.model or str(self.settings["model"]),
            "max_tokens": (
                request.max_tokens
                if request.max_tokens is not None
                else self.int_setting("max_tokens", 1024, minimum=1)
            ),
            "messages": messages,
            **(base if isinstance(base, dict) else {}),
            **request.params,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        wrapped = False
        if request.json_schema is not None:
            schema = request.json_schema
            if schema.get("type") != "object":
                wrapped = True
                schema = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
            body["tools"] = [
                {
                    "name": TOOL_NAME,
                    "description": "Give the reply as this tool's input.",
                    "input_schema": schema,
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
        elif request.format == "json":
            system.append({"type": "text", "text": JSON_INSTRUCTION})
        if system:
            body["system"] = system
        return body, wrapped

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        text = str(message.get("content", ""))
        images = message.get("images") or []
        if not images:
            return {"role": message["role"], "content": text}
        blocks: list[dict[str, Any]] = []
        for data in images:
            mime = image_type(data)[0]
            if mime not in IMAGE_TYPES:
                raise self.error(
                    f"an image of type {mime} cannot go to the Messages API (it reads PNG, "
                    "JPEG, GIF and WebP)",
                    transient=False,
                )
            source = {"type": "base64", "media_type": mime, "data": b64encode(data)}
            blocks.append({"type": "image", "source": source})
        if text:  # (an empty text block is refused by the service)
            blocks.append({"type": "text", "text": text})
        return {"role": message["role"], "content": blocks}

    # --- the call ---------------------------------------------------------------------------

    async def generate_text(self, request: TextRequest) -> TextResult:
        body, wrapped = self.body(request)
        url = "messages"
        async with self.client(request.timeout) as client:
            resp = await self.send(client, "POST", url, json=body, tracker=request.tracker)
        reply = self.json_of(resp)
        remote = reply.get("id") or resp.headers.get("request-id")
        if request.tracker is not None and isinstance(remote, str) and remote:
            request.tracker.remote(remote, answered=True)
        return self.result(reply, body, wrapped, f"POST {url}")

    def result(
        self, reply: dict[str, Any], body: dict[str, Any], wrapped: bool, what: str
    ) -> TextResult:
        """The TextResult of a Messages reply (also what a batch's ``succeeded`` result holds)."""
        content = reply.get("content")
        if not isinstance(content, list):
            raise self.bad_reply(what, "no content list")
        texts: list[str] = []
        tool_input: Any = None
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
                tool_input = block.get("input")
        stop = reply.get("stop_reason")
        meta: dict[str, Any] = {
            "model": reply.get("model", body["model"]),
            "seed": None,
            "stop_reason": stop,
            "stop_sequence": reply.get("stop_sequence"),
        }
        if stop == "refusal":
            meta["refusal"] = "".join(texts) or "the model declined to answer (stop_reason refusal)"
        if "tools" in body and stop != "refusal":
            if tool_input is None:
                raise self.bad_reply(what, f"no {TOOL_NAME} tool call (stop_reason {stop})")
            value = (
                tool_input.get("value") if wrapped and isinstance(tool_input, dict) else tool_input
            )
            text = json.dumps(value, ensure_ascii=False)
            meta["structured_output"] = "tool_use"
        else:
            text = "".join(texts)
        return TextResult(
            text=text, metadata=meta, usage=text_usage(reply.get("usage"), "anthropic")
        )
