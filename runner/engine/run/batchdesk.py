"""Batch mode: the calls of a ``batch: true`` step go to its provider's batch API.

Each element's body asks the desk for its call's answer (``answer``). The desk answers from the
batch rows (state/batchbook.py): a call collected from a batch is answered; one waiting in a
batch that is running is polled (the first element asks, the others share that look); any
other is queued and every element raises BatchPending, so the step ends ``awaiting_batch``.
Once the step's elements have all asked, ``flush`` makes the batches: each is journaled with
its requests before anything is sent (intent), then its uploaded file id, then the service's
batch id, so a kill -9 at any point finds, on the next apply, the file or the batch it made
(by name and metadata) rather than making a second one. A request is in at most one live
batch, and one answered (the ledger) is never queued: the step looks there first.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ProviderError
from ...providers.batchapi import BatchAPI, BatchPending, LineResult, RemoteBatch
from ...state import batchbook
from ...state.journal import Journal
from ...state.records import dumps

POLL_FIRST_S = 1.0  # the first wait between two looks at a running batch; doubled up to:
POLL_MAX_S = 60.0


@dataclass
class _Queued:
    """Requests of one step waiting for their batch, by the provider and endpoint they go to."""

    provider: Any
    api: BatchAPI
    endpoint: str
    items: list[tuple[str, bytes]] = field(default_factory=list)
    bodies: dict[str, Any] = field(default_factory=dict)  # key -> request body (for its price)


class LineBudget(Protocol):
    """The run's budgets, held line by line before a batch is made (engine/run/spend.py)."""

    def hold_line(self, provider: Any, endpoint: str, body: Any, *, what: str) -> Any | None:
        """Hold the line's worst case at the batch price; None: over a budget (not sent)."""
        ...

    def release(self, hold: Any) -> None: ...


class BatchDesk:
    """The run's batches: answers from them, queues for them, makes and collects them.

    ``say(step_id, text)`` tells the user where a step's batch stands (a STEP_WAITING event);
    ``budget()`` gives the run's budgets, each line held under them before its batch is made.
    """

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        say: Callable[[str, str], None] | None = None,
        budget: Callable[[], LineBudget] | None = None,
    ) -> None:
        self.journal, self.run_id = journal, run_id
        self.say = say or (lambda _step, _text: None)
        self.budget = budget
        self._holds: dict[str, Any] = {}  # key -> its line's hold, until its answer is back
        self._queued: dict[tuple[str, str, str], _Queued] = {}  # (step, provider, endpoint)
        self._queued_keys: set[str] = set()
        self._resume: dict[str, tuple[str, Any, BatchAPI]] = {}  # batch id -> step, provider
        self._polls: dict[str, asyncio.Future[None]] = {}  # one look per batch per apply
        self._made: dict[str, tuple[str, Any, BatchAPI]] = {}  # batch id -> step, provider
        # Where each key stands (its latest batch, its item's status) and each batch's status:
        # read from the journal in one query when first asked, then kept as the desk writes
        # (a query per element cost ~50 us of the ~0.1 ms budget an element has).
        self._where: dict[str, tuple[str, str]] | None = None
        self._status: dict[str, str] = {}
        self._said: dict[str, str] = {}  # batch id -> how far it is, as last told

    # --- what a step body asks ------------------------------------------------------------------

    async def answer(
        self,
        *,
        step_id: str,
        provider: Any,
        api: BatchAPI,
        key: str,
        endpoint: str,
        body: dict[str, Any],
    ) -> LineResult:
        """The answer to call ``key`` from a batch, or BatchPending while it has none.

        A failed request's failure is given once (the step's retries decide on it); asked
        again, the call goes into a new batch."""
        where = self._index().get(key)
        if where is not None and where[1] == "pending" and self._status[where[0]] == "submitted":
            await self._poll(where[0], step_id, provider, api)
            where = self._index().get(key)
        if where is not None and where[1] in ("answered", "failed"):
            batch_id, status = where
            self._release(key)
            answer, error = batchbook.item(self.journal, batch_id, key)
            if status == "answered":
                return LineResult(key, batchbook.answer_of(answer))
            batchbook.spend_item(self.journal, batch_id, key)
            self._set(key, batch_id, "spent")
            code, transient, message = (error or "||").split("|", 2)
            return LineResult(
                key, None, int(code) if code.isdigit() else None, message, transient == "1"
            )
        if where is not None and where[1] == "pending":
            batch_id = where[0]
            if self._status[batch_id] in ("intent", "uploaded"):  # made before a crash
                self._resume[batch_id] = (step_id, provider, api)
                raise BatchPending(f"batch {batch_id}: not yet sent", key)
            said = self._said.get(batch_id)
            if said is None:
                said = self._said[batch_id] = self._progress_text(batch_id)
            raise BatchPending(said, key)
        self._queue(step_id, provider, api, key, endpoint, body)
        raise BatchPending("queued for a batch", key)

    def holds(self, key: str) -> bool:
        """Whether a batch holds call ``key``: waiting in one not yet collected, or its answer
        or failure not yet taken (a step without ``batch: true`` asks: sent directly, the call
        would be paid twice)."""
        where = self._index().get(key)
        return where is not None and where[1] in ("pending", "answered", "failed")

    def _index(self) -> dict[str, tuple[str, str]]:
        if self._where is None:
            self._where, self._status = batchbook.where_keys(self.journal)
        return self._where

    def _set(self, key: str, batch_id: str, status: str) -> None:
        self._index()[key] = (batch_id, status)

    def _queue(
        self, step_id: str, provider: Any, api: BatchAPI, key: str, endpoint: str, body: Any
    ) -> None:
        if key in self._queued_keys:  # (two elements with the same request: one line)
            return
        where = (step_id, str(provider.name), endpoint)
        q = self._queued.get(where)
        if q is None:
            q = self._queued[where] = _Queued(provider, api, endpoint)
        q.items.append((key, api.line(key, endpoint, body)))
        q.bodies[key] = body
        self._queued_keys.add(key)

    def _release(self, key: str) -> None:
        hold = self._holds.pop(key, None)
        if hold is not None and self.budget is not None:
            self.budget().release(hold)

    def _within_budget(self, step_id: str, q: _Queued) -> list[tuple[str, bytes]]:
        """The queued lines the run's budgets cover, in order, each held at its worst case at
        the batch price: the batch is made of those (none: not made); the line that would take
        spend over a budget stops the run (exit 9), and it and those after it are not sent."""
        if self.budget is None:
            return q.items
        budget, n = self.budget(), len(q.items)
        kept: list[tuple[str, bytes]] = []
        for i, (key, line) in enumerate(q.items):
            self._release(key)  # (an unfinished line sent again: held anew)
            what = f"request {i + 1} of the {n:,} of step {step_id}'s batch"
            hold = budget.hold_line(q.provider, q.endpoint, q.bodies[key], what=what)
            if hold is None:
                break
            self._holds[key] = hold
            kept.append((key, line))
        if len(kept) < n:
            self.say(
                step_id,
                f"batch not created: the budget covers none of its {n:,} requests"
                if not kept
                else f"batch made of {len(kept):,} of its {n:,} requests: the budget covers no "
                f"more (the other {n - len(kept):,} wait for a raised budget)",
            )
        return kept

    def waiting(self, step_id: str) -> bool:
        """Whether ``step_id`` left requests to send or batches to finish making."""
        return any(w[0] == step_id for w in self._queued) or any(
            s == step_id for s, _p, _a in self._resume.values()
        )

    # --- making batches -------------------------------------------------------------------------

    async def flush(self, step_id: str) -> None:
        """Make the batches of ``step_id``'s queued requests (split at the service's limits)
        and finish making those a crash interrupted. Raises ProviderError when the service
        refuses (the batch rows stay: the next apply goes on from them)."""
        for batch_id, (sid, provider, api) in list(self._resume.items()):
            if sid == step_id:
                del self._resume[batch_id]
                await self._make(batch_id, provider, api)
        for where in [w for w in self._queued if w[0] == step_id]:
            q = self._queued.pop(where)
            self._queued_keys.difference_update(key for key, _line in q.items)
            items = self._within_budget(step_id, q)
            for chunk in _split(items, q.api.max_requests, q.api.max_bytes):
                batch_id = f"rb-{os.urandom(8).hex()}"  # (uuid loads platform: ~1 ms a start)
                batchbook.add_batch(
                    self.journal,
                    batch_id=batch_id,
                    run_id=self.run_id,
                    step_id=step_id,
                    provider=str(q.provider.name),
                    endpoint=q.endpoint,
                    items=chunk,
                )
                self._status[batch_id] = "intent"
                for key, _line in chunk:
                    self._set(key, batch_id, "pending")
                await self._make(batch_id, q.provider, q.api)

    async def _make(self, batch_id: str, provider: Any, api: BatchAPI) -> None:
        """Take batch ``batch_id`` from where its row says to submitted: each step found on
        the service first (the reply of a request that went out may have been lost)."""
        row = batchbook.batch(self.journal, batch_id)
        if row is None:
            return
        self._made[batch_id] = (str(row["step_id"]), provider, api)
        name = f"runner-{batch_id}.jsonl"

        def lines() -> bytes:
            return b"".join(bytes(i["line"]) for i in batchbook.items(self.journal, batch_id))

        if row["status"] == "intent":
            file_id = await api.find_upload(name)
            if file_id is None:
                file_id = await api.upload(name, lines())
            batchbook.update_batch(self.journal, batch_id, status="uploaded", file_id=file_id)
            row["status"], row["file_id"] = "uploaded", file_id
            self._status[batch_id] = "uploaded"
        if row["status"] == "uploaded":
            since, total = float(row["created_at"]), int(row["total"] or 0)
            known = batchbook.remote_ids(self.journal)
            remote = await api.find_batch(batch_id, since=since, total=total, known=known)
            if remote is None:
                file_id, endpoint = str(row["file_id"]), str(row["endpoint"])
                remote = await api.create(file_id, endpoint, batch_id, lines)
            self._note(batch_id, remote, status="submitted")
            self._status[batch_id] = "submitted"
            self.say(str(row["step_id"]), _progress(batch_id, remote))

    def _note(self, batch_id: str, remote: RemoteBatch, **extra: Any) -> None:
        batchbook.update_batch(
            self.journal,
            batch_id,
            remote_id=remote.id,
            remote_status=remote.status,
            **({"total": remote.total} if remote.total else {}),  # (0 while it validates)
            done=remote.completed,
            failed=remote.failed,
            expires_at=remote.expires_at,
            **extra,
        )

    def progress(self, step_id: str) -> str:
        """Where ``step_id``'s live batches of this run stand, as last known (for its reason)."""
        rows = batchbook.live_batches(self.journal, self.run_id)
        return "; ".join(self._progress_text(str(r["id"])) for r in rows if r["step_id"] == step_id)

    # --- collecting -----------------------------------------------------------------------------

    async def settle(self, step_id: str) -> bool:
        """Wait for the batches this apply made for ``step_id`` (up to their provider's
        ``batch_wait``), collecting those that end; whether every one of them has ended (the
        step's elements then run again, and find their answers)."""
        mine = [(b, p, a) for b, (s, p, a) in self._made.items() if s == step_id]
        if not mine or not any(_seconds(p.settings.get("batch_wait")) for _b, p, _a in mine):
            return False
        for batch_id, provider, api in mine:
            self._polls.pop(batch_id, None)
            await self._poll(batch_id, step_id, provider, api)
        for batch_id, _p, _a in mine:
            del self._made[batch_id]
        return all(
            (batchbook.batch(self.journal, b) or {}).get("status") not in batchbook.LIVE
            for b, _p, _a in mine
        )

    async def _poll(self, batch_id: str, step_id: str, provider: Any, api: BatchAPI) -> None:
        """Look at batch ``batch_id`` (once per apply: its elements share the look), waiting
        for it with backoff up to the provider's ``batch_wait`` seconds; collect it when over."""
        fut = self._polls.get(batch_id)
        if fut is None:
            fut = self._polls[batch_id] = asyncio.ensure_future(
                self._watch(batch_id, step_id, provider, api)
            )
        await asyncio.shield(fut)

    async def _watch(self, batch_id: str, step_id: str, provider: Any, api: BatchAPI) -> None:
        row = batchbook.batch(self.journal, batch_id)
        if row is None or row["status"] != "submitted":
            return
        wait = _seconds(provider.settings.get("batch_wait"))
        deadline = time.monotonic() + wait
        delay = POLL_FIRST_S
        while True:
            try:
                remote = await api.get(str(row["remote_id"]))
            except ProviderError as exc:
                if exc.transient and time.monotonic() + delay < deadline:
                    await asyncio.sleep(delay)
                    delay = min(POLL_MAX_S, delay * 2)
                    continue
                self.say(step_id, f"batch {batch_id}: cannot be asked now ({exc.message})")
                return
            if remote.over:
                await self._collect(batch_id, remote, provider, api)
                return
            self._note(batch_id, remote)
            self._said[batch_id] = _progress(batch_id, remote)
            self.say(step_id, _progress(batch_id, remote))
            if time.monotonic() + delay >= deadline:
                return
            await asyncio.sleep(delay)
            delay = min(POLL_MAX_S, delay * 2)

    async def _collect(
        self, batch_id: str, remote: RemoteBatch, provider: Any, api: BatchAPI
    ) -> None:
        """Copy every answer and failure of an ended batch into its items, in one commit
        (masked: a reply that echoes a secret is stored as every record is, with ``***``)."""
        index = self._index()
        mine = {k for k, (b, s) in index.items() if b == batch_id and s == "pending"}
        if remote.status == "failed":  # refused whole (its file did not validate): not retried
            why = f"||the service failed batch {batch_id}: {remote.problem or 'no reason given'}"
            batchbook.abandon(self.journal, batch_id, why, remote_status=remote.status)
            self._status[batch_id] = "abandoned"
            for key in mine:
                index[key] = (batch_id, "failed")
            return
        redact = provider.redactor.redact
        rows: list[tuple[str, str, str | None, str | None]] = []
        for line in await api.results(remote):
            if line.custom_id not in mine:
                continue
            if line.body is not None:
                # (the journal's connection masks every secret runner knows: masked.py)
                rows.append((line.custom_id, "answered", redact(dumps(line.body)), None))
            elif line.status_code is None and line.transient:
                continue  # never ran (expired, cancelled): left unfinished, sent again
            else:
                error = f"{line.status_code or ''}|{int(line.transient)}|{line.message}"
                rows.append((line.custom_id, "failed", None, error))
        self._note(batch_id, remote)
        batchbook.collect(self.journal, batch_id, rows, remote_status=remote.status)
        self._status[batch_id] = "collected"
        for key in mine:
            index[key] = (batch_id, "unfinished")
        for key, status, _answer, _error in rows:
            index[key] = (batch_id, status)

    def _progress_text(self, batch_id: str) -> str:
        return progress_of(batchbook.batch(self.journal, batch_id) or {"id": batch_id})

    # --- cancelling -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop waiting on batches (the run ends): the looks under way are cancelled."""
        for fut in self._polls.values():
            fut.cancel()

    async def cancel(self, providers: Callable[[str], tuple[Any, BatchAPI | None]]) -> int:
        """Cancel the service's batches of this run still running; how many were asked."""
        asked = 0
        for row in batchbook.live_batches(self.journal, self.run_id):
            if row["status"] != "submitted":
                continue
            _provider, api = providers(str(row["provider"]))
            if api is None:
                continue
            remote = await api.cancel(str(row["remote_id"]))
            self._note(str(row["id"]), remote)
            asked += 1
        return asked


def progress_of(row: Mapping[str, Any]) -> str:
    """A journaled batch row as ``batch B: 812 of 1,000 done (in_progress), expires in 19 h``
    (how far it was when last looked at; the page and a waiting step's reason say it)."""
    remote = RemoteBatch(
        id=str(row.get("remote_id")),
        status=str(row.get("remote_status") or row.get("status")),
        total=int(row.get("total") or 0),
        completed=int(row.get("done") or 0),
        failed=int(row.get("failed") or 0),
        expires_at=row.get("expires_at"),
    )
    return _progress(str(row.get("id")), remote)


def _split(
    items: list[tuple[str, bytes]], max_requests: int, max_bytes: int
) -> list[list[tuple[str, bytes]]]:
    """``items`` in runs of at most ``max_requests`` lines and ``max_bytes`` bytes."""
    out: list[list[tuple[str, bytes]]] = []
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) >= max_requests or size + len(item[1]) > max_bytes):
            out.append(chunk)
            chunk, size = [], 0
        chunk.append(item)
        size += len(item[1])
    if chunk:
        out.append(chunk)
    return out


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def _progress(batch_id: str, remote: RemoteBatch) -> str:
    """``batch B: 812 of 1,000 done, expires in 19 h`` (with the service's status)."""
    text = f"batch {batch_id}: {remote.completed:,} of {remote.total:,} done ({remote.status})"
    if remote.expires_at:
        left = remote.expires_at - time.time()
        if left > 0:
            text += (
                f", expires in {round(left / 3600)} h"
                if left >= 3600
                else f", expires in {max(1, round(left / 60))} min"
            )
    return text
