"""Anthropic's Message Batches (``/v1/messages/batches``), as a batch API (batchapi.py).

A batch is created with its requests in the body ({requests: [{custom_id, params}]}, at most
100,000 requests / 256 MB; custom_id 1-64 of ``[a-zA-Z0-9_-]``: a call key is 64 hex digits),
at half the price; its ``processing_status`` is ``in_progress``, ``canceling`` or ``ended``,
``request_counts`` {processing, succeeded, errored, canceled, expired}, and once ended its
``results_url`` gives one JSONL line per request: {custom_id, result: {type: succeeded,
message} | {type: errored, error} | {type: canceled} | {type: expired}}.

There is no file to upload (``upload`` returns a placeholder: ``create`` sends the lines) and a
batch has no metadata, so a batch whose creation reply was lost is found by what it is: made
after runner journaled it, with as many requests, and not one runner already knows. Its answers
are matched by custom_id, so a wrong guess can cost a resend, never a wrong answer.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import ImageRequest, ImageResult, TextRequest, TextResult
from .batchapi import LineResult, RemoteBatch

if TYPE_CHECKING:
    from .anthropic import AnthropicProvider

ENDPOINT = "/v1/messages"
INLINE = "inline"  # the "file" of a batch whose requests go in its creation
_TRANSIENT = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})
# The HTTP status each error type has on the Messages API (its errors reference): an errored
# result carries only the type, and a request that failed ran, unlike an expired one.
_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}  # fmt: skip
_LIST_PAGES = 20


class AnthropicBatches:
    """The Message Batches endpoints of one Anthropic provider."""

    max_requests = 100_000
    max_bytes = 256 * 1024 * 1024

    def __init__(self, provider: AnthropicProvider) -> None:
        self.provider = provider
        limit = provider.settings.get("batch_max_requests")
        if isinstance(limit, int) and limit > 0:
            self.max_requests = limit

    # --- request lines ------------------------------------------------------------------------

    def text_body(self, request: TextRequest) -> tuple[str, dict[str, Any]]:
        return ENDPOINT, self.provider.body(request)[0]

    def text_result(self, body: dict[str, Any], request: TextRequest) -> TextResult:
        sent, wrapped = self.provider.body(request)
        return self.provider.result(body, sent, wrapped, "batch /v1/messages")

    def image_body(self, request: ImageRequest) -> tuple[str, dict[str, Any]]:
        raise self.provider.error("Anthropic's Messages API makes no images", transient=False)

    def image_result(self, body: dict[str, Any], request: ImageRequest) -> ImageResult:
        raise self.provider.error("Anthropic's Messages API makes no images", transient=False)

    def line(self, custom_id: str, endpoint: str, body: dict[str, Any]) -> bytes:
        doc = {"custom_id": custom_id, "params": body}
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

    # --- batches ------------------------------------------------------------------------------

    async def _json(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        p = self.provider
        async with p.client() as client:
            return p.json_of(await p.send(client, method, url, **kw))

    async def upload(self, name: str, data: bytes) -> str:
        return INLINE

    async def find_upload(self, name: str) -> str | None:
        return INLINE

    async def create(
        self, file_id: str, endpoint: str, tag: str, lines: Callable[[], bytes]
    ) -> RemoteBatch:
        requests = [json.loads(raw) for raw in lines().splitlines() if raw.strip()]
        return _batch(await self._json("POST", "messages/batches", json={"requests": requests}))

    async def find_batch(
        self, tag: str, *, since: float, total: int, known: frozenset[str]
    ) -> RemoteBatch | None:
        after: str | None = None
        found: list[RemoteBatch] = []
        for _ in range(_LIST_PAGES):
            q: dict[str, Any] = {"limit": 100, **({"after_id": after} if after else {})}
            reply = await self._json("GET", "messages/batches", params=q)
            data = [b for b in reply.get("data") or [] if isinstance(b, dict)]
            for doc in data:
                made = _when(doc.get("created_at"))
                batch = _batch(doc)
                if made is not None and made >= since - 5 and batch.total == total:
                    found.append(batch)
            if not reply.get("has_more") or not data:
                break
            after = str(data[-1].get("id"))
        mine = [b for b in found if b.id not in known]
        return mine[0] if len(mine) == 1 else None  # none, or not one to be sure of

    async def get(self, remote_id: str) -> RemoteBatch:
        return _batch(await self._json("GET", f"messages/batches/{remote_id}"))

    async def cancel(self, remote_id: str) -> RemoteBatch:
        return _batch(await self._json("POST", f"messages/batches/{remote_id}/cancel"))

    async def results(self, batch: RemoteBatch) -> list[LineResult]:
        p = self.provider
        url = batch.output_file_id or f"messages/batches/{batch.id}/results"
        async with p.client() as client:
            resp = await p.send(client, "GET", url)
        return [_line(json.loads(raw)) for raw in resp.content.splitlines() if raw.strip()]


def _when(value: Any) -> float | None:
    """An RFC 3339 time (the API's ``created_at``) as seconds since the epoch."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _batch(doc: dict[str, Any]) -> RemoteBatch:
    counts = doc.get("request_counts") or {}
    n = {
        k: int(counts.get(k) or 0)
        for k in ("processing", "succeeded", "errored", "canceled", "expired")
    }
    state = str(doc.get("processing_status"))
    if state == "ended":  # the batch API's words for how it ended
        status = "expired" if n["expired"] else "cancelled" if n["canceled"] else "completed"
    else:
        status = {"canceling": "cancelling"}.get(state, state)
    return RemoteBatch(
        id=str(doc.get("id")),
        status=status,
        total=sum(n.values()),
        completed=n["succeeded"] + n["errored"],
        failed=n["errored"],
        expires_at=_when(doc.get("expires_at")),
        output_file_id=doc.get("results_url") or None,
    )


def _line(doc: dict[str, Any]) -> LineResult:
    cid = str(doc.get("custom_id"))
    result = doc.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded" and isinstance(result.get("message"), dict):
        return LineResult(cid, result["message"])
    if kind == "errored":  # failed on its own: the step's retries decide, as on a direct call
        err = (result.get("error") or {}).get("error") or result.get("error") or {}
        type_ = str(err.get("type") or "error")
        message = f"{type_}: {err.get('message')}"
        return LineResult(cid, None, _STATUS.get(type_, 500), message, type_ in _TRANSIENT)
    # canceled or expired: never run, sent again in a new batch
    return LineResult(cid, None, None, f"batch_{kind}", True)
