"""The journal: runs, executions, artifacts, events and idempotency calls in SQLite.

sqlite-utils creates and migrates the tables (ordered migrations, PRAGMA user_version; a fresh
journal is created from a generated snapshot of their result, see snapshot.py); the hot paths use
prepared SQL on the same connection. WAL mode lets a reader (``runner runs show``,
``runner watch``) look while an apply writes.

During an apply the engine turns on batched commits (``batch_commits``): writes join one
transaction that commits ``max_age_s`` after it began (50 ms) and when the apply ends; a commit
per statement cost ~0.2 ms an execution. This keeps the durability rule:
a row is only ever written after the objects it names are durable, so a crash loses at most the
last batch of records, and what they described simply runs again. Idempotency-ledger writes
(the calls table) still commit at once, before and after the paid call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..canonical import CanonicalError
from ..errors import DiskFull, NotFound, StoreError

Migration = Callable[[Any], None]


def _m1_core(db: Any) -> None:
    db["runs"].create(
        {
            "id": str,
            "pipeline": str,
            "pipeline_file": str,
            "item": str,
            "status": str,
            "kind": str,
            "parent_run_id": str,
            "params": str,
            "created_at": float,
            "finished_at": float,
            "exit_code": int,
            "current_phase": str,
            "reason": str,
            "provider_profile": str,
            "reference_asset": str,
            "pid": int,
            "progress": str,
        },
        pk="id",
    )
    db["runs"].create_index(["pipeline", "item"])
    db["executions"].create(
        {
            "id": int,
            "run_id": str,
            "step_id": str,
            "element": int,
            "key": str,
            "status": str,
            "attempts": int,
            "started_at": float,
            "finished_at": float,
            "duration_s": float,
            "error": str,
            "output": str,
            "artifacts": str,
            "files": str,
            "report": str,
            "usage": str,
            "why": str,
            "pipeline": str,
            "key_parts": str,
        },
        pk="id",
    )
    db["executions"].create_index(["run_id", "step_id"])
    db["executions"].create_index(["pipeline", "step_id", "key", "status"])
    db["artifacts"].create({"digest": str, "size": int, "created_at": float}, pk="digest")
    db["events"].create(
        {
            "seq": int,
            "run_id": str,
            "ts": float,
            "type": str,
            "step_id": str,
            "element": int,
            "data": str,
        },
        pk="seq",
    )
    db["events"].create_index(["run_id", "seq"])
    db["calls"].create(
        {
            "key": str,
            "run_id": str,
            "step_id": str,
            "status": str,
            "meta": str,
            "result": str,
            "error": str,
            "started_at": float,
            "finished_at": float,
            "attempts": int,
        },
        pk="key",
    )
    db["file_hashes"].create(
        {"path": str, "size": int, "mtime_ns": int, "inode": int, "sha256": str}, pk="path"
    )


def _m2_iterations(db: Any) -> None:
    db["iterations"].create(
        {
            "id": str,
            "run_id": str,
            "step_id": str,
            "ordinal": int,
            "seed": int,
            "idempotency_key": str,
            "raw": str,
            "final": str,
            "ext": str,
            "compliant": int,
            "compliance": str,
            "picked": int,
            "status": str,
            "error": str,
            "metadata": str,
            "created_at": float,
        },
        pk="id",
    )
    db["iterations"].create_index(["run_id", "ordinal"], unique=True)
    db["iterations"].create_index(["idempotency_key"])


def _m3_decisions(db: Any) -> None:
    db["decisions"].create(
        {
            "id": int,
            "run_id": str,
            "gate": str,
            "status": str,
            "decision": str,
            "by": str,
            "comment": str,
            "input": str,
            "summary": str,
            "requested_at": float,
            "decided_at": float,
            "artifact": str,
            "round": int,
        },
        pk="id",
    )
    db["decisions"].create_index(["run_id", "gate"])


def _m4_gates_cancel(db: Any) -> None:
    # cancel_requested: set by `runner runs cancel` in another process, polled by the run.
    db["runs"].add_column("cancel_requested", float)
    # key: digest of what the reviewer was shown; a decision applies only to that.
    db["decisions"].add_column("key", str)


def _m5_overrides(db: Any) -> None:
    db["overrides"].create(
        {
            "id": int,
            "pipeline": str,
            "step_id": str,
            "element": int,
            "contract": str,
            "output": str,
            "status": str,
            "reason": str,
            "created_at": float,
        },
        pk="id",
    )
    db["overrides"].create_index(["pipeline", "step_id", "element", "status"])
    db["executions"].add_column("contract", str)


def _m6_call_records(db: Any) -> None:
    # What each paid call did on the wire: when its request first reached the backend and the
    # backend's id for it (a job to re-attach to); ``attempts`` counts requests sent from now on.
    db["calls"].add_column("submitted_at", float)
    db["calls"].add_column("remote_id", str)


def _m7_execution_worker(db: Any) -> None:
    # Where the body of an execution ran: a Dask worker's address (NULL: in the coordinator).
    db["executions"].add_column("worker", str)


TABLES = (
    "runs",
    "executions",
    "artifacts",
    "events",
    "calls",
    "file_hashes",
    "iterations",
    "decisions",
    "overrides",
)

MIGRATIONS: list[Migration] = [
    _m1_core,
    _m2_iterations,
    _m3_decisions,
    _m4_gates_cancel,
    _m5_overrides,
    _m6_call_records,
    _m7_execution_worker,
]


def migrate(conn: sqlite3.Connection, *, snapshot: bool = True) -> None:
    """Bring a journal's tables to the latest version, in one transaction.

    A fresh journal is created from the generated snapshot of the latest schema (see
    snapshot.py) when it is current; an older one replays the migrations it lacks through
    sqlite-utils.
    """
    if conn.execute("PRAGMA user_version").fetchone()[0] >= len(MIGRATIONS):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the lock: another process may have migrated meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        fresh = _snapshot_statements() if version == 0 and snapshot else None
        if fresh is not None:
            for statement in fresh:
                conn.execute(statement)
        elif version < len(MIGRATIONS):
            import sqlite_utils  # only needed to change tables

            # No plugins: third-party prepare_connection hooks have no business with the
            # journal (and finding them scans every installed package, ~15 ms).
            db = sqlite_utils.Database(conn, execute_plugins=False)
            for i in range(version, len(MIGRATIONS)):
                MIGRATIONS[i](db)
        conn.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _snapshot_statements() -> tuple[str, ...] | None:
    from . import _schema

    # A snapshot older than the migrations (not regenerated yet) is not used: replaying is
    # always right, the snapshot only faster.
    return _schema.STATEMENTS if len(MIGRATIONS) == _schema.VERSION else None


def now() -> float:
    return time.time()


# One encoder for every record: json.dumps with options builds a new encoder per call. Strict
# JSON only: a NaN written here would reach `runs show --json` and every reader as invalid JSON.
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def dumps(value: Any) -> str:
    """A record's JSON text. Raises CanonicalError (a ValueError) for a number JSON has not;
    every value runner records was checked before (expressions, data files, provider replies),
    so this is the last guard, not the place that explains."""
    try:
        return _ENCODER.encode(value)
    except ValueError as exc:
        raise CanonicalError(f"a value cannot be recorded as JSON: {exc}") from None


# Columns holding JSON documents (verify checks them with SQLite's json_valid).
JSON_COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("params", "progress"),
    "executions": ("output", "artifacts", "files", "report", "usage", "key_parts"),
    "events": ("data",),
    "calls": ("meta", "result"),
    "iterations": ("compliance", "metadata"),
    "decisions": ("input", "summary"),
    "overrides": ("output",),
}

REPAIR_HINT = "see what is wrong with: runner verify; mend it with: runner verify --repair"


def loads(text: str | None) -> Any:
    """A JSON column's value. Raises StoreError for a damaged record (never a traceback)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError(
            f"the journal holds a damaged record (bad JSON: {exc})", hint=REPAIR_HINT
        ) from None


_DAMAGE = ("malformed", "not a database", "no such table", "no such column", "corrupt")


def _is_full(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)


RESERVE = "journal.reserve"
_RESERVE_BYTES = 256 * 1024


def keep_reserve(state_dir: Path) -> None:
    """Keep a small file of space aside: freed when the disk fills, it lets the journal record
    the last batch and the interruption (best effort: a full disk already has none)."""
    path = state_dir / RESERVE
    if path.exists():
        return
    try:
        with open(path, "wb") as f:
            f.truncate(0)
            f.write(b"\0" * _RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)


def release_reserve(state_dir: Path) -> None:
    (state_dir / RESERVE).unlink(missing_ok=True)


def is_damage(exc: Exception) -> bool:
    """Whether an SQLite error means damage (not a lock, a full disk or a bug of ours)."""
    text = str(exc).lower()
    return any(d in text for d in _DAMAGE)


def damaged_journal(path: Path, exc: Exception) -> StoreError:
    """The error for a journal SQLite cannot read (bad pages, not a database, a lost table)."""
    return StoreError(f"the journal {path} is damaged: {exc}", hint=REPAIR_HINT)


def orphaned_objects(state_dir: Path) -> int:
    """How many objects the store holds (0 when it has none): a journal that is missing or
    empty beside them was lost, not new."""
    root = state_dir / "objects"
    try:
        subdirs = [d for d in os.scandir(root) if d.is_dir() and len(d.name) == 2]
    except FileNotFoundError:
        return 0
    return sum(1 for d in subdirs for f in os.scandir(d.path) if len(f.name) == 62)


def lost_journal(path: Path, objects: int) -> StoreError:
    what = "empty (0 bytes)" if path.exists() else "missing"
    return StoreError(
        f"the journal {path} is {what}, but the object store beside it holds {objects} "
        "objects: this is not a new project, and a new journal would forget which paid calls "
        "were made",
        hint="put journal.db back from a backup; or start a new journal that keeps the "
        "objects (the ledger of paid calls is lost): runner verify --repair",
    )


@dataclass
class CachedResult:
    """A completed execution that can stand in for running a step again."""

    key: str
    output: Any
    artifacts: list[str]
    files: dict[str, str]
    status: str
    run_id: str
    report: Any


class Journal:
    """One SQLite journal. Open with ``Journal.open(state_dir)``; close when done."""

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

    @classmethod
    def open(cls, state_dir: Path, *, readonly: bool = False, new: bool = False) -> Journal:
        """Open (or create) the journal of ``state_dir``.

        Raises NotFound when ``readonly`` and there is none, StoreError when it is damaged or
        when it is missing or empty beside an object store that holds objects (unless ``new``:
        a repair starting a new journal on purpose).
        """
        path = state_dir / "journal.db"
        try:
            empty = path.stat().st_size == 0
        except FileNotFoundError:
            empty = True
        if empty and not new:
            objects = orphaned_objects(state_dir)
            if objects:
                raise lost_journal(path, objects)
        if readonly and not path.exists():
            raise NotFound(f"no journal at {path} (nothing has run here yet)")
        state_dir.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise damaged_journal(path, exc) from exc
        journal = cls(conn, path)
        try:
            journal._migrate()
            journal._check_tables()
            if not readonly:
                keep_reserve(state_dir)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise damaged_journal(path, exc) from exc
        except StoreError:
            conn.close()
            raise
        return journal

    def _check_tables(self) -> None:
        """Every table of the schema is there (a dropped one is damage, not an old version)."""
        rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        have = {r[0] for r in rows}
        lost = [t for t in TABLES if t not in have]
        if lost:
            raise StoreError(
                f"the journal {self.path} is damaged: table(s) {', '.join(lost)} missing",
                hint=REPAIR_HINT,
            )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ----------------------------------------------------------------------------

    def _migrate(self) -> None:
        migrate(self.conn)

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
            if not _is_full(exc):
                raise
            self.stop_for_full_disk(exc)
        self._ops.clear()

    def _do(self, op: Callable[[], Any]) -> Any:
        """Run one write; kept for replay while a batch is open (see stop_for_full_disk)."""
        if self._full is not None:
            raise self._full
        try:
            result = op()
        except sqlite3.OperationalError as exc:
            if not _is_full(exc):
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
        self._tx_started = time.monotonic()
        # Committed after max_age_s even when the engine then sits idle (a long step), so a
        # reader in another process sees it soon; without a loop, end_batch commits it.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(self._max_age_s, self._commit_later)

    def _commit_later(self) -> None:
        # A timer's commit: a full disk is recorded (stop_for_full_disk) and raised again at
        # the engine's next write, not in the event loop's callback (no one would catch it).
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

    # -- runs --------------------------------------------------------------------------------

    def create_run(self, run: Mapping[str, Any]) -> None:
        row = dict(run)
        row.setdefault("created_at", now())
        cols = ",".join(row)
        marks = ",".join("?" for _ in row)
        self._write()
        values = list(row.values())
        self._do(lambda: self.conn.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", values))

    def update_run(self, run_id: str, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        self._write()
        values = [*fields.values(), run_id]
        self._do(lambda: self.conn.execute(f"UPDATE runs SET {sets} WHERE id=?", values))

    def get_run(self, run_id: str) -> dict[str, Any]:
        row = self._one("SELECT * FROM runs WHERE id=?", (run_id,))
        if row is None:
            # Allow unique prefixes, as git does for commits.
            rows = self._all("SELECT * FROM runs WHERE id LIKE ? LIMIT 2", (run_id + "%",))
            if len(rows) == 1 and len(run_id) >= 4:
                return rows[0]
            raise NotFound(f"unknown run '{run_id}'", hint="list runs with: runner runs list")
        return row

    def list_runs(
        self,
        *,
        pipeline: str | None = None,
        status: str | None = None,
        item: str | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        where, args = [], []
        for col, val in (("pipeline", pipeline), ("status", status), ("item", item)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        return self._all(
            f"SELECT * FROM runs{clause} ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (*args, limit),
        )

    def active_runs(self, pipeline: str, item: str | None) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM runs WHERE pipeline=? AND item IS ? AND status IN "
            "('running','awaiting_human') ORDER BY created_at DESC",
            (pipeline, item),
        )

    # -- executions ----------------------------------------------------------------------------

    def start_execution(self, row: Mapping[str, Any]) -> int:
        cols = ",".join(row)
        marks = ",".join("?" for _ in row)
        self._write()
        values = list(row.values())
        cur = self._do(
            lambda: self.conn.execute(f"INSERT INTO executions ({cols}) VALUES ({marks})", values)
        )
        return int(cur.lastrowid or 0)

    def finish_execution(self, exec_id: int, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        self._write()
        values = [*fields.values(), exec_id]
        self._do(lambda: self.conn.execute(f"UPDATE executions SET {sets} WHERE id=?", values))

    def cached_results(
        self, pipeline: str, step_ids: Iterable[str] | None = None
    ) -> dict[tuple[str, str], CachedResult]:
        """Every completed (or partial) execution of a pipeline by (step_id, key): one query.

        With ``step_ids``, only those steps' (selected in SQL when they are few).
        """
        wanted = set(step_ids) if step_ids is not None else None
        sql = (
            "SELECT step_id, key, output, artifacts, files, status, run_id, report FROM executions "
            "WHERE pipeline=? AND status IN ('completed','partial')"
        )
        args: list[Any] = [pipeline]
        if wanted is not None and len(wanted) <= 500:
            sql += f" AND step_id IN ({','.join('?' for _ in wanted)})"
            args.extend(sorted(wanted))
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        out: dict[tuple[str, str], CachedResult] = {}
        for step_id, key, output, artifacts, files, status, run_id, report in rows:
            if wanted is not None and step_id not in wanted:
                continue
            out[(step_id, key)] = CachedResult(
                key,
                loads(output),
                loads(artifacts) or [],
                loads(files) or {},
                status,
                run_id,
                loads(report),
            )
        return out

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM executions WHERE run_id=? ORDER BY id", (run_id,))

    def workers(self, run_id: str) -> dict[str, dict[str, int]]:
        """Where each step of a run ran: step -> {worker address: executions}; empty for a run
        whose bodies all ran in the coordinator (the local executor)."""
        out: dict[str, dict[str, int]] = {}
        for row in self._all(
            "SELECT step_id, worker, COUNT(*) AS n FROM executions WHERE run_id=? "
            "AND worker IS NOT NULL GROUP BY step_id, worker",
            (run_id,),
        ):
            out.setdefault(row["step_id"], {})[row["worker"]] = int(row["n"])
        return out

    def last_execution(
        self, pipeline: str, step_id: str, element: int = -1
    ) -> dict[str, Any] | None:
        return self._one(
            "SELECT * FROM executions WHERE pipeline=? AND step_id=? AND element=? "
            "AND status NOT IN ('running') ORDER BY id DESC LIMIT 1",
            (pipeline, step_id, element),
        )

    def mark_interrupted(self, run_ids: list[str]) -> None:
        from .interrupt import mark_interrupted

        self._write()
        for rid in run_ids:
            mark_interrupted(self.conn, "id=?", (rid,))

    # -- artifacts --------------------------------------------------------------------------------

    def record_artifacts(self, digests: Mapping[str, int]) -> None:
        t = now()
        self._many(
            "INSERT OR IGNORE INTO artifacts (digest, size, created_at) VALUES (?,?,?)",
            [(d, s, t) for d, s in digests.items()],
        )

    def artifact_digests(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT digest FROM artifacts")}

    # -- events ----------------------------------------------------------------------------------

    def add_events(self, rows: list[tuple[str, float, str, str | None, int | None, str]]) -> None:
        self._many(
            "INSERT INTO events (run_id, ts, type, step_id, element, data) VALUES (?,?,?,?,?,?)",
            rows,
        )

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM events WHERE run_id=? AND seq>? ORDER BY seq", (run_id, after)
        )

    # -- idempotent calls ------------------------------------------------------------------------

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
        self, sql: str, args: tuple[Any, ...], *, sent: bool = True, stops: bool = True
    ) -> None:
        """One ledger statement, committed on its own, never with a pending batch (committed
        first). A full disk is met here at once, as in a batch: the reserve is freed, this
        statement written again with this process's runs marked interrupted, in one
        transaction, and DiskFull is raised (before, the raw SQLite error left the run
        `running` until the next apply).

        A record about a request already ``sent`` (its attempt, job, result or failure: what
        was paid) is still tried once the disk is full, on what is left of the reserve; a call
        not begun is not. A record made while a call is out (``stops=False``: sent, its job id)
        does not raise: the call's answer is still recorded, then the run stops."""

        def op() -> object:
            return self.conn.execute(sql, args)

        try:
            try:
                self.commit()
            except DiskFull:
                if sent:
                    with contextlib.suppress(sqlite3.Error):
                        op()
                raise
            if self._full is not None:
                if sent:
                    with contextlib.suppress(sqlite3.Error):
                        op()
                raise self._full
            try:
                op()
            except sqlite3.OperationalError as exc:
                if not _is_full(exc):
                    raise
                self._ops = [op]
                self.stop_for_full_disk(exc)
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
        )

    def call_sent(self, key: str) -> None:
        """A request of call ``key`` reached the backend: one more attempt, first submission."""
        self._ledger(
            "UPDATE calls SET attempts=COALESCE(attempts, 0)+1, "
            "submitted_at=COALESCE(submitted_at, ?) WHERE key=?",
            (now(), key),
            stops=False,
        )

    def call_remote_id(self, key: str, remote_id: str) -> None:
        """The backend's id of call ``key`` (its job), journaled before the call waits on it."""
        self._ledger("UPDATE calls SET remote_id=? WHERE key=?", (remote_id, key), stops=False)

    def complete_call(self, key: str, result: Mapping[str, Any]) -> None:
        if self.before_commit is not None and self._full is None:
            with contextlib.suppress(DiskFull):  # (the ledger below meets it too, and says so)
                self.commit()
                self.before_commit()  # the result names an object: durable before it is recorded
        self._ledger(
            "UPDATE calls SET status='completed', result=?, error=NULL, finished_at=? WHERE key=?",
            (dumps(dict(result)), now(), key),
        )

    def note_call_job(self, key: str, job: Mapping[str, Any] | None) -> None:
        """Record (None: clear) the remote job of an in-flight call in its meta, durably now:
        a job-queue provider calls this before it waits, so a crash re-attaches to the job."""
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

    # -- file hash cache -----------------------------------------------------------------------

    def file_hashes(self) -> dict[str, tuple[int, int, int, str]]:
        return {
            r[0]: (r[1], r[2], r[3], r[4])
            for r in self.conn.execute(
                "SELECT path, size, mtime_ns, inode, sha256 FROM file_hashes"
            )
        }

    def save_file_hashes(self, rows: list[tuple[str, int, int, int, str]]) -> None:
        self._many(
            "INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, inode, sha256) "
            "VALUES (?,?,?,?,?)",
            rows,
        )

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

    def __init__(self, journal: Journal) -> None:
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
            if isinstance(exc, sqlite3.OperationalError) and _is_full(exc):
                self.journal.stop_for_full_disk(exc)
            return
        try:
            if self.journal.before_commit is not None:
                self.journal.before_commit()
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as failed:
            if not _is_full(failed):
                raise
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self.journal.stop_for_full_disk(failed)
