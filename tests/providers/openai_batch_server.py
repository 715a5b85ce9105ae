"""A loopback OpenAI Files + Batch API written from OpenAI's specification (openai-openapi).

Facts from the spec: POST /files (multipart: ``purpose`` = ``batch``, ``file``) answers an
OpenAIFile {id, object: "file", bytes, created_at, filename, purpose}; GET /files?purpose=
lists them ({object: "list", data, has_more}); GET /files/{id}/content gives the bytes. POST
/batches {input_file_id, endpoint, completion_window: "24h", metadata (16 string pairs)}
answers a Batch {id, object: "batch", endpoint, errors, input_file_id, completion_window,
status, output_file_id, error_file_id, created_at, in_progress_at, expires_at, finalizing_at,
completed_at, failed_at, expired_at, cancelling_at, cancelled_at, request_counts {total,
completed, failed}, metadata}; status is one of validating, failed, in_progress, finalizing,
completed, expired, cancelling, cancelled; GET /batches lists (``after``, ``limit``), POST
/batches/{id}/cancel cancels. Each input line is {custom_id, method: "POST", url, body}; each
output and error line is {id, custom_id, response: {status_code, request_id, body} | null,
error: {code, message} | null}. A batch that expires or is cancelled keeps what it finished;
its other requests are in the error file (``batch_expired``, ``batch_cancelled``).

A batch's progress is a function of the clock and what is on disk under ``root`` (its files
and batches as JSON), so a double stopped and started again on the same root (a restart of the
service) goes on where it was. Each request line is answered by the same handler a direct call
reaches (OpenAIServer's chat and images), so a batch answer is the direct one's.
``answered`` counts, per custom_id, the times a request was executed (billed) across every
batch: a request sent twice shows as 2.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .openai_server import OpenAIServer, error, invalid
from .servers import Recorded, Reply

ENDPOINTS = ("/v1/chat/completions", "/v1/images/generations")


class OpenAIBatchServer(OpenAIServer):
    """OpenAIServer with /v1/files and /v1/batches.

    ``validate_s``: how long a batch stays validating; ``per_request_s``: how long each request
    takes in progress; ``finalize_s``: finalizing; ``expire_s``: the completion window (24 h);
    ``fail_ids``: custom_ids answered 500 in the error file (a partial failure);
    ``fail_once``: a request whose body holds this text is answered 500 the first time it runs;
    ``expiring``: how many of the first batches made expire after ``expire_s`` (the later ones
    have the whole 24 h);
    ``upload_delay_s`` / ``create_delay_s``: how long an upload / a batch's creation is
    answered after it is stored (a client killed meanwhile never learns its id).
    """

    def __init__(
        self,
        root: Path,
        *,
        port: int = 0,
        validate_s: float = 0.0,
        per_request_s: float = 0.0,
        finalize_s: float = 0.0,
        expire_s: float = 24 * 3600.0,
        fail_ids: frozenset[str] = frozenset(),
        upload_delay_s: float = 0.0,
        create_delay_s: float = 0.0,
        fail_once: str | None = None,
        expiring: int | None = None,
        api_key: str | None = None,
        refuse: str | None = None,
    ) -> None:
        super().__init__(api_key=api_key)
        self.port = port
        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        (root / "batches").mkdir(parents=True, exist_ok=True)
        self.validate_s, self.per_request_s = validate_s, per_request_s
        self.finalize_s, self.expire_s = finalize_s, expire_s
        self.fail_ids, self.upload_delay_s = fail_ids, upload_delay_s
        self.create_delay_s = create_delay_s
        self.fail_once, self.expiring = fail_once, expiring
        self.refuse = refuse  # a request whose body holds this fails the whole batch's validation
        self._state = threading.RLock()
        self.route("POST", "/v1/files", self._keyed(self._upload))
        self.route("GET", "/v1/files", self._keyed(self._list_files))
        self.route("GET", "/v1/files/[^/]+/content", self._keyed(self._content))
        self.route("POST", "/v1/batches", self._keyed(self._create))
        self.route("GET", "/v1/batches", self._keyed(self._list_batches))
        self.route("GET", "/v1/batches/[^/]+", self._keyed(self._get))
        self.route("POST", "/v1/batches/[^/]+/cancel", self._keyed(self._cancel))

    def _keyed(self, handler: Any) -> Any:
        """``handler`` behind the service's key check (as every other endpoint)."""

        def serve(rec: Recorded) -> Reply:
            refused = self._refuse(rec, azure=False)
            return refused if refused is not None else handler(rec)

        return serve

    # --- what the tests read ------------------------------------------------------------------

    def batches(self) -> list[dict[str, Any]]:
        with self._state:
            return [self._advance(b) for b in self._all_batches()]

    def uploads(self) -> list[dict[str, Any]]:
        """The batch input files uploaded (purpose ``batch``)."""
        metas = [json.loads(p.read_text()) for p in (self.root / "files").glob("*.json")]
        return [m for m in metas if m["purpose"] == "batch"]

    def answered(self) -> collections.Counter[str]:
        """custom_id -> how many times its request was executed, over every batch."""
        counts: collections.Counter[str] = collections.Counter()
        for b in self.batches():
            for cid in b.get("_executed", []):
                counts[cid] += 1
        return counts

    # --- files --------------------------------------------------------------------------------

    def _file_meta(self, file_id: str) -> dict[str, Any] | None:
        path = self.root / "files" / f"{file_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def _store_file(self, name: str, purpose: str, data: bytes) -> dict[str, Any]:
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        (self.root / "files" / f"{file_id}.bin").write_bytes(data)
        meta = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": name,
            "purpose": purpose,
            "status": "processed",
        }
        (self.root / "files" / f"{file_id}.json").write_text(json.dumps(meta))
        return meta

    def _upload(self, rec: Recorded) -> Reply:
        parts = {name: (fn, data) for name, fn, data in rec.parts()}
        purpose = parts.get("purpose", (None, b""))[1].decode()
        if purpose not in ("batch", "assistants", "vision", "user_data", "fine-tune", "evals"):
            return invalid(f"'{purpose}' is not one of the supported purposes", "purpose")
        if "file" not in parts:
            return invalid("Missing required parameter: 'file'.", "file")
        name, data = parts["file"]
        with self._state:
            meta = self._store_file(name or "upload.jsonl", purpose, data)
        time.sleep(self.upload_delay_s)  # stored, then answered: a client killed now lost its id
        return Reply(body=meta)

    def _list_files(self, rec: Recorded) -> Reply:
        purpose = next(iter(rec.query.get("purpose") or []), None)
        metas = [json.loads(p.read_text()) for p in (self.root / "files").glob("*.json")]
        data = [m for m in metas if purpose is None or m["purpose"] == purpose]
        data.sort(key=lambda m: m["created_at"], reverse=True)
        return Reply(body={"object": "list", "data": data, "has_more": False})

    def _content(self, rec: Recorded) -> Reply:
        file_id = rec.path.split("/")[3]
        path = self.root / "files" / f"{file_id}.bin"
        if not path.exists():
            return error(404, f"No such File object: {file_id}", "invalid_request_error", "id")
        return Reply(body=path.read_bytes(), content_type="application/octet-stream")

    # --- batches ------------------------------------------------------------------------------

    def _batch_path(self, batch_id: str) -> Path:
        return self.root / "batches" / f"{batch_id}.json"

    def _all_batches(self) -> list[dict[str, Any]]:
        found = [json.loads(p.read_text()) for p in (self.root / "batches").glob("*.json")]
        return sorted(found, key=lambda b: (b["created_at"], b["id"]), reverse=True)

    def _save(self, batch: dict[str, Any]) -> None:
        tmp = self._batch_path(batch["id"]).with_suffix(".tmp")
        tmp.write_text(json.dumps(batch))
        tmp.replace(self._batch_path(batch["id"]))

    def _create(self, rec: Recorded) -> Reply:
        body = rec.json()
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not body.get(name):
                return invalid(f"Missing required parameter: '{name}'.", name)
        if body["completion_window"] != "24h":
            return invalid("Invalid 'completion_window': expected '24h'.", "completion_window")
        if body["endpoint"] not in (*ENDPOINTS, "/v1/responses", "/v1/embeddings"):
            return invalid(f"Invalid 'endpoint': {body['endpoint']}", "endpoint")
        metadata = body.get("metadata") or {}
        if len(metadata) > 16 or not all(isinstance(v, str) for v in metadata.values()):
            return invalid("metadata: at most 16 string pairs", "metadata")
        meta = self._file_meta(str(body["input_file_id"]))
        if meta is None or meta["purpose"] != "batch":
            return invalid(f"No batch file {body['input_file_id']}", "input_file_id")
        now = time.time()
        lines = (self.root / "files" / f"{meta['id']}.bin").read_bytes().splitlines()
        expire_s = self.expire_s
        if self.expiring is not None and len(self._all_batches()) >= self.expiring:
            expire_s = 24 * 3600.0
        batch = {
            "id": f"batch_{uuid.uuid4().hex[:24]}",
            "object": "batch",
            "endpoint": body["endpoint"],
            "errors": None,
            "input_file_id": meta["id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + expire_s,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": metadata,
        }
        with self._state:
            self._save(batch)
        time.sleep(self.create_delay_s)
        return Reply(body=self._public(batch))

    def _list_batches(self, rec: Recorded) -> Reply:
        limit = int((rec.query.get("limit") or ["20"])[0])
        after = next(iter(rec.query.get("after") or []), None)
        with self._state:
            batches = [self._advance(b) for b in self._all_batches()]
        if after is not None:
            ids = [b["id"] for b in batches]
            batches = batches[ids.index(after) + 1 :] if after in ids else []
        page = batches[:limit]
        return Reply(
            body={
                "object": "list",
                "data": [self._public(b) for b in page],
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(batches) > limit,
            }
        )

    def _get(self, rec: Recorded) -> Reply:
        batch_id = rec.path.split("/")[3]
        with self._state:
            if not self._batch_path(batch_id).exists():
                return error(404, f"No batch found with id '{batch_id}'.", "invalid_request_error")
            batch = self._advance(json.loads(self._batch_path(batch_id).read_text()))
        return Reply(body=self._public(batch))

    def _cancel(self, rec: Recorded) -> Reply:
        batch_id = rec.path.split("/")[3]
        with self._state:
            if not self._batch_path(batch_id).exists():
                return error(404, f"No batch found with id '{batch_id}'.", "invalid_request_error")
            batch = self._advance(json.loads(self._batch_path(batch_id).read_text()))
            if batch["status"] in ("validating", "in_progress", "finalizing"):
                batch["status"], batch["cancelling_at"] = "cancelling", time.time()
                self._save(batch)
                batch = self._advance(batch)
        return Reply(body=self._public(batch))

    @staticmethod
    def _public(batch: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in batch.items() if not k.startswith("_")}
        for k, v in out.items():  # the spec's timestamps are integers
            if k.endswith("_at") and isinstance(v, float):
                out[k] = int(v)
        return out

    # --- progress -----------------------------------------------------------------------------

    def _advance(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` moved on to where the clock says it is now (saved when it moved)."""
        now = time.time()
        before = batch["status"]
        total = batch["request_counts"]["total"]
        # Each moment is when the clock says it came, not when someone looked.
        validated = batch["created_at"] + self.validate_s
        if batch["status"] == "validating" and now >= validated:
            problem = self._invalid(batch)
            if problem is not None:
                batch.update(status="failed", failed_at=validated, errors=problem)
            else:
                batch.update(status="in_progress", in_progress_at=validated)
        if batch["status"] == "in_progress":
            until = min(now, batch["expires_at"])
            ran = until - batch["in_progress_at"]
            done = total if self.per_request_s <= 0 else min(total, int(ran / self.per_request_s))
            batch["request_counts"]["completed"] = done
            if done >= total:
                finalizing = batch["in_progress_at"] + total * max(self.per_request_s, 0.0)
                batch.update(status="finalizing", finalizing_at=finalizing)
            elif now >= batch["expires_at"]:
                self._finish(batch, done, "expired", "batch_expired")
        if batch["status"] == "finalizing" and now >= batch["finalizing_at"] + self.finalize_s:
            self._finish(batch, total, "completed", "")
        if batch["status"] == "cancelling":
            done = batch["request_counts"]["completed"]
            self._finish(batch, done, "cancelled", "batch_cancelled")
        if batch["status"] != before:
            self._save(batch)
        return batch

    def _invalid(self, batch: dict[str, Any]) -> dict[str, Any] | None:
        lines = (self.root / "files" / f"{batch['input_file_id']}.bin").read_bytes().splitlines()
        seen: set[str] = set()
        for n, raw in enumerate(lines, 1):
            try:
                line = json.loads(raw)
            except ValueError:
                return _errors("invalid_json_line", "This line is not parseable as valid JSON.", n)
            cid = line.get("custom_id")
            if not isinstance(cid, str) or cid in seen:
                return _errors("duplicate_custom_id", "custom_id must be unique", n)
            seen.add(cid)
            if line.get("method") != "POST" or line.get("url") != batch["endpoint"]:
                return _errors("mismatched_endpoint", "url must match the batch's endpoint", n)
            if self.refuse is not None and self.refuse in json.dumps(line.get("body")):
                return _errors("invalid_request", "The model `test-chat` does not exist.", n)
        return None

    def _finish(self, batch: dict[str, Any], done: int, status: str, code: str) -> None:
        """Run the first ``done`` requests (each as a direct call would be) and write the
        output and error files; the rest are in the error file with ``code``."""
        lines = (self.root / "files" / f"{batch['input_file_id']}.bin").read_bytes().splitlines()
        out: list[str] = []
        errs: list[str] = []
        executed: list[str] = []
        ran_before = {c for b in self._all_batches() for c in b.get("_executed", [])}
        for n, raw in enumerate(lines):
            line = json.loads(raw)
            rid = f"batch_req_{uuid.uuid4().hex[:24]}"
            if n >= done:
                err = {"code": code, "message": f"This request could not be executed ({status})."}
                errs.append(json.dumps({"id": rid, "custom_id": line["custom_id"], **_no(err)}))
                continue
            executed.append(line["custom_id"])
            once = self.fail_once is not None and self.fail_once in json.dumps(line["body"])
            if once and line["custom_id"] not in ran_before:
                self.fail_ids = self.fail_ids | {line["custom_id"]}
            elif once:
                self.fail_ids = self.fail_ids - {line["custom_id"]}
            if line["custom_id"] in self.fail_ids:
                body = {"error": {"message": "The server had an error", "type": "server_error"}}
                resp = {"status_code": 500, "request_id": f"req_{rid}", "body": body}
                errs.append(
                    json.dumps(
                        {"id": rid, "custom_id": line["custom_id"], "response": resp, "error": None}
                    )
                )
                continue
            reply = self._direct(line)
            resp = {"status_code": reply.status, "request_id": f"req_{rid}", "body": reply.body}
            text = json.dumps(
                {"id": rid, "custom_id": line["custom_id"], "response": resp, "error": None}
            )
            (out if reply.status == 200 else errs).append(text)
        failed = len(errs) - (len(lines) - done)
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(out),
            "failed": failed,
        }
        if out:
            data = ("\n".join(out) + "\n").encode()
            batch["output_file_id"] = self._store_file(
                f"batch_{batch['id']}_output.jsonl", "batch_output", data
            )["id"]
        if errs:
            data = ("\n".join(errs) + "\n").encode()
            batch["error_file_id"] = self._store_file(
                f"batch_{batch['id']}_error.jsonl", "batch_output", data
            )["id"]
        batch["_executed"] = executed
        batch["status"] = status
        batch[f"{status}_at"] = time.time()

    def _direct(self, line: dict[str, Any]) -> Reply:
        """The reply a direct call with this body gets (the same handler answers it)."""
        path = str(line["url"])
        body = json.dumps(line["body"]).encode()
        rec = Recorded("POST", path, {}, {"content-type": "application/json"}, body)
        handler = self._chat if path.endswith("/chat/completions") else self._generate
        reply: Reply = handler(rec)
        if reply.status == 200:
            with self.billed_lock:
                self.billed += 1
        return reply


def _errors(code: str, message: str, line: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"code": code, "message": message, "line": line}]}


def _no(err: dict[str, Any]) -> dict[str, Any]:
    return {"response": None, "error": err}
