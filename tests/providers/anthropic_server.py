"""A loopback Anthropic Messages API server written from Anthropic's API reference.

Facts from docs.claude.com/en/api (messages, errors, prompt caching) and the generated types of
anthropics/anthropic-sdk-python: POST /v1/messages needs ``x-api-key`` and ``anthropic-version``
headers and a body with ``model``, ``max_tokens`` (required, >= 1) and ``messages`` (roles
``user``/``assistant`` only: system text is the top-level ``system``, a string or text blocks);
content is a string or blocks (``text``, ``image`` with ``source {type: base64, media_type,
data}`` of image/jpeg, png, gif or webp). ``tools`` [{name, description, input_schema}] with
``input_schema.type`` "object", and ``tool_choice {type: "tool", name}`` forcing that tool. A
``cache_control: {type: "ephemeral"}`` on a block makes the prefix up to it cacheable: the first
request writes it (``cache_creation_input_tokens``), later ones with the same prefix read it
(``cache_read_input_tokens``); ``input_tokens`` counts only the rest. The reply: {id "msg_...",
type "message", role "assistant", model, content [...], stop_reason (end_turn, max_tokens,
stop_sequence, tool_use, refusal), stop_sequence, usage {input_tokens, output_tokens,
cache_creation_input_tokens, cache_read_input_tokens, service_tier}}, with a ``request-id``
header. Errors: {type "error", error {type, message}, request_id}: 400 invalid_request_error,
401 authentication_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error
(``retry-after``), 500 api_error, 529 overloaded_error.

What it ignores, as the reference does not make it change a reply here: ``temperature``,
``top_p``, ``top_k``, ``metadata``, ``service_tier``, an ``Idempotency-Key`` (not documented:
every valid request is generated and billed, counted in ``billed``). The minimum cacheable prefix
(1,024 tokens on most models) is not enforced. Tokens are counted as words, as a stand-in.
"""

from __future__ import annotations

import base64
import binascii
import threading
import uuid
from typing import Any

from .servers import ProtocolServer, Recorded, Reply

REFUSE = "[[REFUSE]]"  # a prompt containing it is declined (stop_reason refusal)
OVERLOAD = "[[OVERLOAD]]"  # a prompt containing it is answered 529 overloaded_error once
IMAGE_TYPES = {
    "image/png": b"\x89PNG",
    "image/jpeg": b"\xff\xd8\xff",
    "image/gif": b"GIF8",
    "image/webp": b"RIFF",
}
KNOWN_FIELDS = {
    "model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "tools", "tool_choice", "metadata", "service_tier", "thinking",
}  # fmt: skip


def error(status: int, type_: str, message: str, **headers: str) -> Reply:
    rid = f"req_{uuid.uuid4().hex[:24]}"
    body = {"type": "error", "error": {"type": type_, "message": message}, "request_id": rid}
    return Reply(status, body, headers={"request-id": rid, **headers})


def invalid(message: str) -> Reply:
    return error(400, "invalid_request_error", message)


def words(value: Any) -> int:
    """A stand-in token count: the words of every text in ``value``."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(words(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") == "image":
            return 100  # an image is priced as input tokens by the service
        return sum(words(v) for k, v in value.items() if k in ("text", "content"))
    return 0


class AnthropicServer(ProtocolServer):
    """POST /v1/messages as the service answers it."""

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key  # None: any key is accepted (one must still be sent)
        self.billed = 0
        self.cached: set[str] = set()  # the cacheable prefixes written
        self.usages: list[dict[str, Any]] = []  # the usage of every billed reply, in order
        self._lock2 = threading.Lock()
        self._overloaded: set[str] = set()
        self.route("POST", "/v1/messages", self._messages)

    def __enter__(self) -> AnthropicServer:
        super().__enter__()
        return self

    def _refuse(self, rec: Recorded) -> Reply | None:
        key = rec.headers.get("x-api-key")
        if not key:
            return error(401, "authentication_error", "x-api-key header is required")
        if self.api_key is not None and key != self.api_key:
            return error(401, "authentication_error", "invalid x-api-key")
        if not rec.headers.get("anthropic-version"):
            return invalid("anthropic-version: header is required")
        return None

    def _messages(self, rec: Recorded) -> Reply:
        refused = self._refuse(rec)
        if refused is not None:
            return refused
        try:
            body = rec.json()
        except ValueError:
            return invalid("There was an error parsing the body of your request")
        unknown = sorted(set(body) - KNOWN_FIELDS)
        if unknown:
            return invalid(f"{unknown[0]}: Extra inputs are not permitted")
        if body.get("stream"):
            return invalid("stream: this double speaks no server-sent events")
        for name in ("model", "messages", "max_tokens"):
            if name not in body:
                return invalid(f"{name}: Field required")
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
            return invalid("max_tokens: Input should be greater than or equal to 1")
        system = body.get("system", [])
        problem = self._check_messages(body["messages"]) or self._check_blocks(system, "system")
        if problem:
            return invalid(problem)
        tools = body.get("tools") or []
        for i, tool in enumerate(tools):
            schema = tool.get("input_schema") if isinstance(tool, dict) else None
            if not isinstance(schema, dict) or schema.get("type") != "object":
                return invalid(f"tools.{i}.custom.input_schema.type: Input should be 'object'")
        choice = body.get("tool_choice")
        forced = choice is not None and choice.get("type") == "tool"
        if forced and choice.get("name") not in {t.get("name") for t in tools}:
            return invalid(f"tool_choice: tool '{choice.get('name')}' not found in tools")
        prompt = " ".join(self._texts(body["messages"]))
        if REFUSE in prompt:
            return self._bill(
                body, [{"type": "text", "text": "I can't help with that."}], "refusal"
            )
        if OVERLOAD in prompt:
            with self._lock2:
                first = prompt not in self._overloaded
                self._overloaded.add(prompt)
            if first:
                return error(529, "overloaded_error", "Overloaded")
        if choice is not None and choice.get("type") == "tool":
            tool = next(t for t in tools if t.get("name") == choice["name"])
            value = _instance(tool["input_schema"], prompt)
            block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}",
                     "name": tool["name"], "input": value}  # fmt: skip
            return self._bill(body, [block], "tool_use")
        text = f"echo: {prompt}"
        stops = [s for s in body.get("stop_sequences") or [] if s in text]
        if stops:
            first_stop = min(stops, key=text.index)
            text = text[: text.index(first_stop)]
            return self._bill(body, [{"type": "text", "text": text}], "stop_sequence", first_stop)
        limited = text.split()[: body["max_tokens"]]
        reason = "max_tokens" if len(limited) < len(text.split()) else "end_turn"
        return self._bill(body, [{"type": "text", "text": " ".join(limited)}], reason)

    def _check_messages(self, messages: Any) -> str | None:
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                role = m.get("role") if isinstance(m, dict) else None
                return f"messages.{i}.role: Input should be 'user' or 'assistant'" + (
                    " (system text goes in the top-level system parameter)" if role else ""
                )
            problem = self._check_blocks(m.get("content"), f"messages.{i}.content")
            if problem:
                return problem
        return None

    @staticmethod
    def _check_blocks(content: Any, where: str) -> str | None:
        if isinstance(content, str):
            return None
        if not isinstance(content, list):
            return f"{where}: Input should be a valid list"
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if not block.get("text"):
                    return f"{where}.{j}.text: text content blocks must be non-empty"
            elif kind == "image":
                source = block.get("source") or {}
                mime = source.get("media_type")
                if source.get("type") != "base64" or mime not in IMAGE_TYPES:
                    return f"{where}.{j}.source.media_type: Input should be 'image/jpeg', " \
                        "'image/png', 'image/gif' or 'image/webp'"  # fmt: skip
                try:
                    data = base64.b64decode(source.get("data", ""), validate=True)
                except (binascii.Error, ValueError):
                    return f"{where}.{j}.source.data: invalid base64 data"
                if not data.startswith(IMAGE_TYPES[mime]):
                    return f"{where}.{j}: Image does not match the provided media type {mime}"
            elif kind not in ("tool_use", "tool_result"):
                return f"{where}.{j}.type: unknown content block type {kind!r}"
        return None

    @staticmethod
    def _texts(messages: list[dict[str, Any]]) -> list[str]:
        out = []
        for m in messages:
            content = m["content"]
            if isinstance(content, str):
                out.append(content)
            else:
                out.extend(b["text"] for b in content if b.get("type") == "text")
        return out

    def _bill(
        self, body: dict[str, Any], content: list[dict[str, Any]], stop: str, seq: str | None = None
    ) -> Reply:
        system = body.get("system", [])
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
        # The cacheable prefix: the system blocks up to the last one marked cache_control.
        marked = [i for i, b in enumerate(blocks) if b.get("cache_control")]
        prefix = blocks[: marked[-1] + 1] if marked else []
        rest = blocks[len(prefix) :]
        prefix_tokens = words(prefix)
        key = repr((body["model"], prefix))
        with self._lock2:
            hit = bool(prefix) and key in self.cached
            if prefix:
                self.cached.add(key)
            usage = {
                "input_tokens": words(rest) + words(body["messages"]),
                "output_tokens": words(content) or 1,
                "cache_creation_input_tokens": 0 if hit or not prefix else prefix_tokens,
                "cache_read_input_tokens": prefix_tokens if hit else 0,
                "service_tier": "standard",
            }
            self.billed += 1
            self.usages.append(usage)
        reply = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": seq,
            "usage": usage,
        }
        return Reply(body=reply, headers={"request-id": f"req_{uuid.uuid4().hex[:24]}"})


def _instance(schema: dict[str, Any], salt: str) -> Any:
    """A small value meeting ``schema`` (objects, arrays, strings, numbers, enums)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind == "object":
        return {k: _instance(v, salt) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_instance(schema.get("items") or {}, salt)] * max(1, schema.get("minItems", 1))
    if kind == "integer":
        return int(schema.get("minimum", 7))
    if kind == "number":
        return float(schema.get("minimum", 0.5))
    if kind == "boolean":
        return True
    return f"about {salt[:40]}"
