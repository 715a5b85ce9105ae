"""OpenAI's Batch API (and that of OpenAI-compatible services): /files, /batches.

A batch is a JSONL file of requests uploaded with purpose ``batch``, then a batch made of it
(endpoint, ``completion_window: "24h"``, metadata); the service answers within the window at
half the price, the answers in an output file and the failures in an error file, each line
{id, custom_id, response: {status_code, request_id, body}, error}. One batch holds at most
50,000 requests and 200 MB. Runner names each upload ``runner-<batch>.jsonl`` and tags each
batch's metadata with ``runner_batch``, so a batch whose reply was lost (a kill -9 between the
request and the journal) is found again, never made twice (engine/run/batchdesk.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._http import b64decode, usage_ints
from .base import ImageRequest, ImageResult, TextRequest, TextResult
from .batchapi import LineResult, RemoteBatch

if TYPE_CHECKING:
    from .openai import OpenAIProvider

TAG = "runner_batch"  # the metadata key naming runner's batch id
TEXT_ENDPOINT = "/v1/chat/completions"
IMAGE_ENDPOINT = "/v1/images/generations"
_LIST_PAGES = 20  # batches listed (100 a page) when looking for one whose creation was lost


class OpenAIBatches:
    """The batch endpoints of one OpenAI provider (its base_url, key and headers)."""

    max_requests = 50_000
    max_bytes = 200 * 1024 * 1024

    def __init__(self, provider: OpenAIProvider) -> None:
        self.provider = provider
        limit = provider.settings.get("batch_max_requests")
        if isinstance(limit, int) and limit > 0:  # a smaller split (a service's own limit)
            self.max_requests = limit

    # --- request lines ------------------------------------------------------------------------

    def form(self) -> str:
        """The structured-output form of a batch's schema requests: the setting, else
        json_schema (a batch cannot fall back to another form on a refusal: it answers later)."""
        chosen = self.provider.settings.get("structured_output")
        return chosen if isinstance(chosen, str) else "json_schema"

    def text_body(self, request: TextRequest) -> tuple[str, dict[str, Any]]:
        return TEXT_ENDPOINT, self.provider.chat_body(request, self.form())

    def text_result(self, body: dict[str, Any], request: TextRequest) -> TextResult:
        form = self.form() if request.json_schema is not None else None
        return self.provider.chat_result(body, request, form)

    def image_body(self, request: ImageRequest) -> tuple[str, dict[str, Any]]:
        return IMAGE_ENDPOINT, self.provider.image_body(request)

    def image_result(self, body: dict[str, Any], request: ImageRequest) -> ImageResult:
        what = f"batch {IMAGE_ENDPOINT}"
        data = body.get("data")
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise self.provider.bad_reply(what, "no data[0] in the reply")
        first = data[0]
        if not first.get("b64_json"):  # a URL would expire before a batch is collected
            raise self.provider.bad_reply(what, "data[0] has no b64_json")
        try:
            image = b64decode(first["b64_json"], "data[0].b64_json")
        except ValueError as exc:
            raise self.provider.bad_reply(what, str(exc)) from None
        model = str(request.params.get("model") or self.provider.settings["image_model"])
        meta = {"model": model, "seed": None, "revised_prompt": first.get("revised_prompt")}
        usage = usage_ints(
            body.get("usage"),
            {
                "input_tokens": "prompt_tokens",
                "output_tokens": "completion_tokens",
                "total_tokens": "total_tokens",
            },
        )
        return ImageResult(image=image, metadata=meta, usage=usage)

    def line(self, custom_id: str, endpoint: str, body: dict[str, Any]) -> bytes:
        doc = {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body}
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"

    # --- files and batches --------------------------------------------------------------------

    async def _json(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        p = self.provider
        async with p.client() as client:
            resp = await p.send(client, method, url, params={**p.query(), **kw.pop("q", {})}, **kw)
            return p.json_of(resp)

    async def upload(self, name: str, data: bytes) -> str:
        reply = await self._json(
            "POST",
            "files",
            data={"purpose": "batch"},
            files={"file": (name, data, "application/jsonl")},
        )
        file_id = reply.get("id")
        if not isinstance(file_id, str):
            raise self.provider.bad_reply("POST files", "no id")
        return file_id

    async def find_upload(self, name: str) -> str | None:
        reply = await self._json("GET", "files", q={"purpose": "batch"})
        for f in reply.get("data") or []:
            if isinstance(f, dict) and f.get("filename") == name and isinstance(f.get("id"), str):
                return str(f["id"])
        return None

    async def create(
        self, file_id: str, endpoint: str, tag: str, lines: Callable[[], bytes]
    ) -> RemoteBatch:
        body = {
            "input_file_id": file_id,
            "endpoint": endpoint,
            "completion_window": "24h",
            "metadata": {TAG: tag},
        }
        return _batch(await self._json("POST", "batches", json=body))

    async def find_batch(
        self, tag: str, *, since: float, total: int, known: frozenset[str]
    ) -> RemoteBatch | None:
        after: str | None = None
        for _ in range(_LIST_PAGES):
            q: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
            reply = await self._json("GET", "batches", q=q)
            data = [b for b in reply.get("data") or [] if isinstance(b, dict)]
            for b in data:
                if (b.get("metadata") or {}).get(TAG) == tag:
                    return _batch(b)
            if not reply.get("has_more") or not data:
                return None
            after = str(data[-1].get("id"))
        return None

    async def get(self, remote_id: str) -> RemoteBatch:
        return _batch(await self._json("GET", f"batches/{remote_id}"))

    async def cancel(self, remote_id: str) -> RemoteBatch:
        return _batch(await self._json("POST", f"batches/{remote_id}/cancel"))

    async def results(self, batch: RemoteBatch) -> list[LineResult]:
        out: list[LineResult] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            p = self.provider
            async with p.client() as client:
                resp = await p.send(client, "GET", f"files/{file_id}/content", params=p.query())
            for raw in resp.content.splitlines():
                if raw.strip():
                    out.append(_line(json.loads(raw)))
        return out


def _batch(doc: dict[str, Any]) -> RemoteBatch:
    counts = doc.get("request_counts") or {}
    errors = (doc.get("errors") or {}).get("data") or []
    problem = "; ".join(
        f"line {e.get('line')}: {e.get('message')}" for e in errors if isinstance(e, dict)
    )
    expires = doc.get("expires_at")
    return RemoteBatch(
        id=str(doc.get("id")),
        status=str(doc.get("status")),
        total=int(counts.get("total") or 0),
        completed=int(counts.get("completed") or 0),
        failed=int(counts.get("failed") or 0),
        expires_at=float(expires) if isinstance(expires, (int, float)) else None,
        output_file_id=doc.get("output_file_id") or None,
        error_file_id=doc.get("error_file_id") or None,
        problem=problem or None,
    )


def _line(doc: dict[str, Any]) -> LineResult:
    cid = str(doc.get("custom_id"))
    resp = doc.get("response") or None
    err = doc.get("error") or None
    if isinstance(resp, dict) and 200 <= int(resp.get("status_code") or 0) < 300:
        body = resp.get("body")
        return LineResult(cid, body if isinstance(body, dict) else {})
    if isinstance(resp, dict):
        status = int(resp.get("status_code") or 0)
        body = resp.get("body") or {}
        message = str(((body.get("error") or {}) if isinstance(body, dict) else {}).get("message"))
        transient = status in (408, 429) or status >= 500
        return LineResult(cid, None, status, f"HTTP {status}: {message}", transient)
    code = str((err or {}).get("code") or "error")
    message = str((err or {}).get("message") or "")
    # An expired or cancelled batch did not run the request: it is sent again in a new batch.
    transient = code in ("batch_expired", "batch_cancelled")
    return LineResult(cid, None, None, f"{code}: {message}", transient)
