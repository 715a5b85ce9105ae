"""Batched commits on the journal's SQLite connection, and what a full disk does to them.

During an apply the engine turns on batched commits (``batch_commits``): writes join one
transaction that commits ``max_age_s`` after it began (50 ms) and when the apply ends; a commit
per statement cost ~0.2 ms an execution. This keeps the durability rule: a row is only ever
written after the objects it names are durable (``before_commit``, the object store's grouped
fsyncs), so a crash loses at most the last batch of records, and what they described simply
runs again. A full disk met anywhere frees the reserve, writes the open batch again with this
process's runs marked interrupted, and stops every later write (DiskFull).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DiskFull
from .records import is_full, release_reserve


class BatchedJournal:
    """The journal's connection with batched commits; the tables' own methods live in the
    subclasses (ledger.CallLedger, journal.Journal)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._batching = False
        # The writes of the open batch, to write again if a full disk rolls the batch back.
        self._ops: list[Callable[[], object]] = []
        self._full: DiskFull | None = None  # set once the disk filled up: nothing more is written
        # Called before every commit during an apply: the object store makes the objects the
        # records name durable first (grouped fsyncs; see ObjectStore.sync).
        self.before_commit: Callable[[], None] | None = None
        self._max_age_s = 0.05
        self._tx_started = 0.0
        self._settling: asyncio.Future[None] | None = None  # the group commit on its way

    def close(self) -> None:
        self._tx_started = -1.0  # (a timer still set finds nothing to commit)
        self.conn.close()

    def transaction(self) -> _Tx:
        self.commit()  # a pending batch first: BEGIN cannot nest
        return _Tx(self)

    # -- batched commits -------------------------------------------------------------------------

    def batch_commits(self, max_age_s: float = 0.05) -> None:
        """Group later writes into transactions that commit ``max_age_s`` after they begin."""
        self._batching = True
        self._max_age_s = max_age_s

    def end_batch(self) -> None:
        """Commit what is pending and go back to a commit per statement."""
        self.commit()
        self._batching = False

    def commit(self) -> None:
        """Commit the pending batch, if any."""
        if self.conn.in_transaction:
            self._durable_then("COMMIT")

    def _durable_then(self, sql: str) -> None:
        try:
            if self.before_commit is not None:
                self.before_commit()
            self.conn.execute(sql)
        except sqlite3.OperationalError as exc:
            if not is_full(exc):
                raise
            self.stop_for_full_disk(exc)
        self._ops.clear()
        self._tx_started = -1.0  # no batch open: a timer set for the one just ended does nothing

    def _do(self, op: Callable[[], Any]) -> Any:
        """Run one write; kept for replay while a batch is open (see stop_for_full_disk)."""
        if self._full is not None:
            raise self._full
        try:
            result = op()
        except sqlite3.OperationalError as exc:
            if not is_full(exc):
                raise
            self.stop_for_full_disk(exc)
        if self._batching and self.conn.in_transaction:
            self._ops.append(op)
        return result

    def stop_for_full_disk(self, cause: BaseException) -> None:
        """The disk is full: free the reserve kept for this moment, commit what the open batch
        recorded (SQLite rolled it back: it is written again) and mark this process's running
        runs interrupted, then refuse every later write. Always raises DiskFull."""
        if self._full is not None:
            raise self._full
        self._full = DiskFull(
            f"the disk holding {self.path.parent} is full ({cause}); the run stopped and is "
            "marked interrupted, and everything it finished is recorded",
            hint="free some space (or copy the project to a bigger disk), then apply again: "
            "it resumes where it stopped",
        )
        release_reserve(self.path.parent)
        from .interrupt import mark_interrupted

        ops, self._ops = self._ops, []
        try:
            if not self.conn.in_transaction:
                self.conn.execute("BEGIN IMMEDIATE")
                for op in ops:
                    op()
            mark_interrupted(
                self.conn, "pid=?", (os.getpid(),), reason="interrupted: the disk is full"
            )
            self.conn.execute("COMMIT")
        except sqlite3.Error:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        raise self._full

    def _write(self) -> None:
        """Called before every write: opens the batch transaction when batching."""
        if self._full is not None:
            raise self._full
        if not self._batching:
            return
        if self.conn.in_transaction:
            if time.monotonic() - self._tx_started > self._max_age_s:
                self._durable_then("COMMIT")
            else:
                return
        self.conn.execute("BEGIN IMMEDIATE")
        self._tx_started = started = time.monotonic()
        # Committed after max_age_s even when the engine then sits idle (a long step), so a
        # reader in another process sees it soon; without a loop, end_batch commits it.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(self._max_age_s, self._commit_later, started)

    async def settle(self) -> None:
        """Return once every write made so far is committed (a group commit): the writers of
        one moment (the elements of a for_each that start or finish together) share one
        COMMIT, made on the event loop's next turn. Raises DiskFull as a commit would."""
        if not self.conn.in_transaction:
            if self._full is not None:
                raise self._full
            return
        loop = asyncio.get_running_loop()
        done = self._settling
        if done is None or done.done() or done.get_loop() is not loop:  # (a loop that ended)
            done = self._settling = loop.create_future()
            loop.call_soon(self._settle_now, done)
        await asyncio.shield(done)

    def _settle_now(self, done: asyncio.Future[None]) -> None:
        if self._settling is done:
            self._settling = None
        try:
            self.commit()
        except Exception as exc:  # DiskFull: every writer waiting on this commit meets it
            done.set_exception(exc)
            done.exception()  # (marked retrieved: a cancelled waiter leaves it unread)
        else:
            done.set_result(None)

    def _commit_later(self, started: float) -> None:
        # A timer's commit: a full disk is recorded (stop_for_full_disk) and raised again at
        # the engine's next write, not in the event loop's callback (no one would catch it).
        if started != self._tx_started:
            return  # its batch was committed already: the next one has a timer of its own (it
            # committed the next one young, doubling the commits of a busy for_each)
        with contextlib.suppress(DiskFull):
            self.commit()

    def _many(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """executemany in one transaction (autocommit would commit each row on its own)."""
        if not rows:
            return
        self._write()
        if self.conn.in_transaction:
            self._do(lambda: self.conn.executemany(sql, rows))
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self._do(lambda: self.conn.executemany(sql, rows))
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self._durable_then("COMMIT")

    # -- helpers -----------------------------------------------------------------------------

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, args)
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> dict[str, Any] | None:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return self._all(sql, args)


class _Tx:
    """``with journal.transaction() as conn``: all or nothing; a full disk met inside or at the
    commit rolls it back whole and stops as a batch does (DiskFull, runs marked interrupted)."""

    def __init__(self, journal: BatchedJournal) -> None:
        self.journal = journal
        self.conn = journal.conn

    def __enter__(self) -> sqlite3.Connection:
        if self.journal._full is not None:
            raise self.journal._full
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc_type:
            self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError) and is_full(exc):
                self.journal.stop_for_full_disk(exc)
            return
        try:
            if self.journal.before_commit is not None:
                self.journal.before_commit()
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as failed:
            if not is_full(failed):
                raise
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.journal.stop_for_full_disk(failed)
