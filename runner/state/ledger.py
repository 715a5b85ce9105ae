"""The provider-call ledger: the journal's ``calls`` table, one row per paid call (keyed by its
idempotency key), so a call that was paid is never paid again.

A call's row says it began before its request is sent, counts each request that reached the
backend, keeps a job-queue backend's job id before the call waits on it, and holds the result
(or the failure: failed, or maybe executed when the reply was lost).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from typing import Any

from ..errors import DiskFull
from .batching import BatchedJournal
from .records import dumps, is_full, loads, now


class CallLedger(BatchedJournal):
    """The ledger's reads and writes; the journal (journal.Journal) is one."""

    def call(self, key: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM calls WHERE key=?", (key,))

    def calls(self, run_id: str) -> list[dict[str, Any]]:
        """The keyed provider calls last made by ``run_id``, in the order they began."""
        return self._all(
            "SELECT key, step_id, status, error, started_at, finished_at, submitted_at, "
            "remote_id, attempts, meta FROM calls WHERE run_id=? ORDER BY started_at, rowid",
            (run_id,),
        )

    def _ledger(
        self,
        sql: str,
        args: tuple[Any, ...],
        *,
        sent: bool = True,
        stops: bool = True,
        durable: bool = True,
    ) -> None:
        """One ledger statement. During an apply (batched commits) it joins the open batch and,
        when ``durable``, commits it at once: one COMMIT for the batch and the record (before,
        the batch was committed first and the record on its own: two). A record that is not
        ``durable`` is committed by the writer's ``settle()`` (one COMMIT for the records of
        every call that reached that point together) or by the batch. Outside an apply it
        commits on its own. A full disk is met here at once, as in a batch: the reserve is
        freed, the batch and this statement written again with this process's runs marked
        interrupted, in one transaction, and DiskFull is raised.

        A record about a request already ``sent`` (its attempt, job, result or failure: what
        was paid) is still tried once the disk is full, on what is left of the reserve; a call
        not begun is not. A record made while a call is out (``stops=False``: sent, its job id)
        does not raise: the call's answer is still recorded, then the run stops."""

        def op() -> object:
            return self.conn.execute(sql, args)

        try:
            if self._full is None:
                with contextlib.suppress(DiskFull):  # (an aged batch's commit: handled below)
                    if self._batching:
                        self._write()  # opens the batch, or joins it
                    else:
                        self.commit()
            if self._full is not None:
                if sent:
                    with contextlib.suppress(sqlite3.Error):
                        op()
                raise self._full
            try:
                op()
            except sqlite3.OperationalError as exc:
                if not is_full(exc):
                    raise
                self._ops.append(op)
                self.stop_for_full_disk(exc)
            if self.conn.in_transaction:
                self._ops.append(op)  # written again if a full disk rolls the batch back
                if durable:
                    self._durable_then("COMMIT")
        except DiskFull:
            if stops:
                raise

    def begin_call(self, key: str, run_id: str, step_id: str, meta: Mapping[str, Any]) -> None:
        self._ledger(  # (sent=False: once the disk is full, no call begins)
            "INSERT INTO calls (key, run_id, step_id, status, meta, started_at, attempts) "
            "VALUES (?,?,?,'in_flight',?,?,0) ON CONFLICT(key) DO UPDATE SET "
            "status='in_flight', run_id=excluded.run_id, error=NULL, "
            "started_at=excluded.started_at",
            (key, run_id, step_id, dumps(dict(meta)), now()),
            sent=False,
            durable=False,  # the step settles it (Journal.settle) before calling the provider
        )

    def call_sent(self, key: str) -> None:
        """A request of call ``key`` reached the backend: one more attempt, first submission."""
        self._ledger(
            "UPDATE calls SET attempts=COALESCE(attempts, 0)+1, "
            "submitted_at=COALESCE(submitted_at, ?) WHERE key=?",
            (now(), key),
            stops=False,
            durable=False,  # settled by the HTTP layer before the request's first byte goes out
        )

    def call_remote_id(self, key: str, remote_id: str, *, durable: bool = True) -> None:
        """The backend's id of call ``key`` (its job), journaled before the call waits on it;
        ``durable=False``: an id that came with the reply (an OpenAI completion's), committed
        with the result the step records next (a commit per call less)."""
        self._ledger(
            "UPDATE calls SET remote_id=? WHERE key=?",
            (remote_id, key),
            stops=False,
            durable=durable,
        )

    def complete_call(self, key: str, result: Mapping[str, Any]) -> None:
        # The result names an object: durable before it is recorded (a batch's COMMIT makes it
        # so through before_commit; a record committed on its own needs it first).
        if self.before_commit is not None and self._full is None and not self._batching:
            with contextlib.suppress(DiskFull):  # (the ledger below meets it too, and says so)
                self.commit()
                self.before_commit()
        self._ledger(
            # A provider with no HTTP layer (fake, a plugin) never reports call_sent: a call
            # that completed reached its backend at least once all the same.
            "UPDATE calls SET status='completed', result=?, error=NULL, finished_at=?, "
            "attempts=MAX(COALESCE(attempts, 0), 1), "
            "submitted_at=COALESCE(submitted_at, started_at) WHERE key=?",
            (dumps(dict(result)), now(), key),
            durable=False,  # the step settles it before the call's log or object says more
        )

    def note_call_job(self, key: str, job: Mapping[str, Any] | None) -> None:
        """Record (None: clear) the remote job of an in-flight call in its meta, durably now:
        a job-queue provider calls this before it waits, so a crash re-attaches to the job."""
        if not self._batching:  # (a batch's own writes are seen by the read below)
            with contextlib.suppress(DiskFull):  # (met again below, where it is handled)
                self.commit()
        row = self._one("SELECT meta FROM calls WHERE key=?", (key,))
        meta = (loads(row["meta"]) if row else None) or {}
        meta["remote_job"] = dict(job) if job else None
        self._ledger("UPDATE calls SET meta=? WHERE key=?", (dumps(meta), key), stops=False)

    def call_job(self, key: str) -> dict[str, Any] | None:
        """The remote job recorded for ``key`` by ``note_call_job``, or None."""
        row = self._one("SELECT meta FROM calls WHERE key=?", (key,))
        meta = (loads(row["meta"]) if row else None) or {}
        job = meta.get("remote_job") if isinstance(meta, dict) else None
        return dict(job) if isinstance(job, dict) else None

    def fail_call(self, key: str, error: str, status: str = "failed") -> None:
        """Record call ``key`` as ``status`` (failed, or maybe_executed: the reply was lost)."""
        self._ledger(
            "UPDATE calls SET status=?, error=?, finished_at=? WHERE key=?",
            (status, error, now(), key),
        )
