"""A loopback Anthropic Message Batches API, written from Anthropic's API reference.

Facts from the reference: POST /v1/messages/batches {requests: [{custom_id, params}]} (at most
100,000 requests; custom_id 1-64 characters of ``[a-zA-Z0-9_-]``, unique in the batch) answers a
MessageBatch {id: "msgbatch_...", type: "message_batch", processing_status: in_progress |
canceling | ended, request_counts {processing, succeeded, errored, canceled, expired},
ended_at, created_at, expires_at (RFC 3339), cancel_initiated_at, archived_at, results_url};
GET /v1/messages/batches lists them newest first ({data, has_more, first_id, last_id},
``after_id``, ``limit``); POST .../{id}/cancel; the results (only once ended) are JSONL, one
line per request {custom_id, result: {type: succeeded, message} | {type: errored, error:
{type: "error", error: {type, message}}} | {type: canceled} | {type: expired}}, in no set
order ("results are not guaranteed to be in the same order as requests": this double gives
them last request first). Every request needs x-api-key and anthropic-version, as /v1/messages
does. request_counts keep every request ``processing`` until the whole batch has ended. A batch
not done within 24 hours (``expires_at``) ends: the requests it did not reach are ``expired``.

Each request is answered by the same handler a direct /v1/messages call reaches, when the batch
ends (``per_request_s`` each); ``create_hold_s`` holds a creation that long before the batch is
made (a client killed meanwhile never learns of it, yet the service makes it), and
``create_delay_s`` answers it that long after (a client killed meanwhile never learns its id);
``results_delay_s`` holds each results download. ``expire_s`` (for the first ``expiring``
batches, every one when None) stands for the 24 hours. With ``root`` every batch is kept on
disk, so a double stopped and started again on the same root and port (a restart of the
service) goes on where it was: its progress is a function of the clock. ``answered`` counts
each custom_id's executions.
"""

from __future__ import annotations

import collections
import datetime
import json
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .anthropic_server import AnthropicServer, invalid
from .servers import Recorded, Reply

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


DAY_S = 24 * 3600.0


class AnthropicBatchServer(AnthropicServer):
    def __init__(
        self,
        *,
        api_key: str | None = None,
        per_request_s: float = 0.0,
        create_delay_s: float = 0.0,
        create_hold_s: float = 0.0,
        results_delay_s: float = 0.0,
        expire_s: float = DAY_S,
        expiring: int | None = None,
        root: Path | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(api_key=api_key)
        self.port = port
        self.per_request_s, self.create_delay_s = per_request_s, create_delay_s
        self.create_hold_s, self.results_delay_s = create_hold_s, results_delay_s
        self.expire_s, self.expiring = expire_s, expiring
        self.root = root
        self._batches: dict[str, dict[str, Any]] = {}
        self._guard = threading.RLock()
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
            for path in sorted(root.glob("msgbatch_*.json")):
                batch = json.loads(path.read_text(encoding="utf-8"))
                self._batches[batch["id"]] = batch
        self.route("POST", "/v1/messages/batches", self._keyed(self._create))
        self.route("GET", "/v1/messages/batches", self._keyed(self._list))
        self.route("GET", "/v1/messages/batches/[^/]+", self._keyed(self._get))
        self.route("POST", "/v1/messages/batches/[^/]+/cancel", self._keyed(self._cancel))
        self.route("GET", "/v1/messages/batches/[^/]+/results", self._keyed(self._results))

    def _keyed(self, handler: Any) -> Any:
        def serve(rec: Recorded) -> Reply:
            refused = self._refuse(rec)
            return refused if refused is not None else handler(rec)

        return serve

    # --- what the tests read ------------------------------------------------------------------

    def batches(self) -> list[dict[str, Any]]:
        with self._guard:
            return [self._public(self._advance(b)) for b in self._batches.values()]

    def answered(self) -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        with self._guard:
            for b in self._batches.values():
                for cid in b.get("_executed", []):
                    counts[cid] += 1
        return counts

    # --- the endpoints ------------------------------------------------------------------------

    def _create(self, rec: Recorded) -> Reply:
        requests = rec.json().get("requests")
        if not isinstance(requests, list) or not 0 < len(requests) <= 100_000:
            return invalid("requests: between 1 and 100,000 requests are required")
        seen: set[str] = set()
        for i, r in enumerate(requests):
            cid = r.get("custom_id") if isinstance(r, dict) else None
            if not isinstance(cid, str) or not CUSTOM_ID.match(cid) or cid in seen:
                return invalid(f"requests.{i}.custom_id: must be unique, 1-64 of [a-zA-Z0-9_-]")
            if not isinstance(r.get("params"), dict):
                return invalid(f"requests.{i}.params: Field required")
            seen.add(cid)
        time.sleep(self.create_hold_s)
        now = time.time()
        with self._guard:
            expires = self.expire_s if self.expiring is None or self.expiring > 0 else DAY_S
            if self.expiring is not None:
                self.expiring -= 1
            batch: dict[str, Any] = {
                "id": f"msgbatch_{uuid.uuid4().hex[:24]}",
                "type": "message_batch",
                "processing_status": "in_progress",
                "created": now,
                "expires": now + expires,
                "ended": None,
                "cancel_at": None,
                "_requests": requests,
                "_headers": rec.headers,
            }
            self._batches[batch["id"]] = batch
            self._save(batch)
            public = self._public(batch)
        time.sleep(self.create_delay_s)
        return Reply(body=public)

    def _list(self, rec: Recorded) -> Reply:
        limit = int(next(iter(rec.query.get("limit") or []), 20))
        after = next(iter(rec.query.get("after_id") or []), None)
        with self._guard:
            found = sorted(self._batches.values(), key=lambda b: b["created"], reverse=True)
            found = [self._advance(b) for b in found]
            if after is not None:
                ids = [b["id"] for b in found]
                found = found[ids.index(after) + 1 :] if after in ids else []
            page = [self._public(b) for b in found[:limit]]
        return Reply(
            body={
                "data": page,
                "has_more": len(found) > limit,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
            }
        )

    def _find(self, rec: Recorded) -> dict[str, Any] | None:
        batch_id = rec.path.split("/")[4]
        with self._guard:
            batch = self._batches.get(batch_id)
            return None if batch is None else self._advance(batch)

    def _get(self, rec: Recorded) -> Reply:
        batch = self._find(rec)
        if batch is None:
            return Reply(404, {"type": "error", "error": {"type": "not_found_error",
                                                          "message": "batch not found"}})  # fmt: skip
        return Reply(body=self._public(batch))

    def _cancel(self, rec: Recorded) -> Reply:
        batch = self._find(rec)
        if batch is None:
            return Reply(404, {"type": "error", "error": {"type": "not_found_error",
                                                          "message": "batch not found"}})  # fmt: skip
        with self._guard:
            if batch["processing_status"] == "in_progress":
                batch["cancel_at"] = time.time()
                self._save(batch)
                batch = self._advance(batch)
            return Reply(body=self._public(batch))

    def _results(self, rec: Recorded) -> Reply:
        batch = self._find(rec)
        if batch is None or batch["processing_status"] != "ended":
            return invalid("results are available once the batch has ended")
        # (in no set order, as the reference warns: the last request's result first)
        lines = "".join(json.dumps(r) + "\n" for r in reversed(batch["_results"]))
        return Reply(
            body=lines.encode(), content_type="application/binary", delay=self.results_delay_s
        )

    # --- progress -----------------------------------------------------------------------------

    def _advance(self, batch: dict[str, Any]) -> dict[str, Any]:
        if batch["processing_status"] == "ended":
            return batch
        total = len(batch["_requests"])
        now = time.time()
        until = min(batch["cancel_at"] or now, batch["expires"])
        ran = until - batch["created"]
        done = total if self.per_request_s <= 0 else min(total, int(ran / self.per_request_s))
        if done >= total or batch["cancel_at"] is not None:
            self._end(batch, done, "canceled", batch["cancel_at"] or now)
        elif now >= batch["expires"]:  # not done within its 24 hours: the rest expire
            self._end(batch, done, "expired", batch["expires"])
        return batch

    def _end(self, batch: dict[str, Any], done: int, rest: str, at: float) -> None:
        """Run the first ``done`` requests (each as a direct call would be); the others end
        ``rest`` (canceled or expired), never run."""
        results: list[dict[str, Any]] = []
        executed: list[str] = []
        for n, r in enumerate(batch["_requests"]):
            if n >= done:
                results.append({"custom_id": r["custom_id"], "result": {"type": rest}})
                continue
            executed.append(r["custom_id"])
            sent = Recorded(
                "POST", "/v1/messages", {}, batch["_headers"], json.dumps(r["params"]).encode()
            )
            reply = self._messages(sent)
            if reply.status == 200:
                result = {"type": "succeeded", "message": reply.body}
            else:
                result = {"type": "errored", "error": reply.body}
            results.append({"custom_id": r["custom_id"], "result": result})
        batch.update(processing_status="ended", ended=at, _results=results)
        batch["_executed"] = executed
        self._save(batch)

    def _save(self, batch: dict[str, Any]) -> None:
        if self.root is not None:
            path = self.root / f"{batch['id']}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(batch), encoding="utf-8")
            tmp.replace(path)

    def _public(self, batch: dict[str, Any]) -> dict[str, Any]:
        total = len(batch["_requests"])
        counts = {"processing": total, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if batch["processing_status"] == "ended":
            counts["processing"] = 0
            for r in batch["_results"]:
                kind = r["result"]["type"]
                counts[kind] = counts.get(kind, 0) + 1
        return {
            "id": batch["id"],
            "type": "message_batch",
            "processing_status": batch["processing_status"],
            "request_counts": counts,
            "ended_at": _rfc3339(batch["ended"]) if batch["ended"] else None,
            "created_at": _rfc3339(batch["created"]),
            "expires_at": _rfc3339(batch["expires"]),
            "cancel_initiated_at": _rfc3339(batch["cancel_at"]) if batch["cancel_at"] else None,
            "archived_at": None,
            "results_url": (
                f"{self.url}/v1/messages/batches/{batch['id']}/results"
                if batch["processing_status"] == "ended"
                else None
            ),
        }
