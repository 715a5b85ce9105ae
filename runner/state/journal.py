"""The journal: runs, executions, artifacts, events and idempotency calls in SQLite.

The tables come from the ordered migrations (migrations.py; a fresh journal is created from a
generated snapshot of their result, see snapshot.py); the hot paths use prepared SQL on the same
connection. WAL mode lets a reader (``runner runs show``, ``runner watch``) look while an apply
writes. Writes are batched during an apply (batching.py); the provider-call ledger is
ledger.py.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import NotFound, StoreError, UsageError
from .ledger import CallLedger
from .masked import MaskedConnection
from .migrations import TABLES, migrate
from .records import (
    REPAIR_HINT,
    damaged_journal,
    keep_reserve,
    lenient_text,
    loads,
    lost_journal,
    now,
    orphaned_objects,
)
from .repeats import as_own, events_of, rows_run
from .wal import wal_mode


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


_RESULT = (
    "SELECT output, artifacts, files, status, run_id, report FROM executions "
    "WHERE pipeline=? AND step_id=? AND key=? AND status IN ('completed','partial') "
    "ORDER BY id DESC LIMIT 1"
)


_ANY_RESULT_OF_PIPELINE = (
    "SELECT 1 FROM executions WHERE pipeline=? AND status IN ('completed','partial') LIMIT 1"
)

_ANY_RESULT = (
    "SELECT 1 FROM executions WHERE pipeline=? AND step_id=? AND status IN ('completed','partial') "
    "LIMIT 1"
)


# The step ids that have executions in a pipeline, one index probe each (a loose scan of the
# (pipeline, step_id, ...) index), not a walk of every row.
_STEP_IDS = (
    "WITH RECURSIVE s(id) AS (SELECT MIN(step_id) FROM executions WHERE pipeline=?1 "
    "UNION ALL SELECT (SELECT MIN(step_id) FROM executions WHERE pipeline=?1 AND step_id > s.id) "
    "FROM s WHERE s.id IS NOT NULL) SELECT id FROM s WHERE id IS NOT NULL"
)

_KEYS_OF_STEP = (
    "SELECT key FROM executions WHERE pipeline=? AND step_id=? "
    "AND status IN ('completed','partial') AND key IS NOT NULL"
)


# The results of the (step, key) pairs a run named, in one statement (latest last).
_RESULTS_OF_RUN = (
    "SELECT e.step_id, e.key, e.output, e.artifacts, e.files, e.status, e.run_id, e.report "
    "FROM executions AS e JOIN (SELECT DISTINCT step_id, key FROM executions WHERE run_id=?) "
    "AS r ON e.step_id = r.step_id AND e.key = r.key "
    "WHERE e.pipeline=? AND e.status IN ('completed','partial') ORDER BY e.id"
)


class CachedResults:
    """The latest completed (or partial) execution that answers (step_id, key), looked up when
    asked (one indexed query, remembered, hit or miss), so an apply costs what its steps cost,
    not what the pipeline's whole history holds (loading every result up front grew with each
    run: 0.21 s of a 0.47 s apply of 1,000 steps after 30 runs). The results of the keys the
    pipeline's latest run named, most of an unchanged pipeline's, are read at once (a query
    per step cost a 10,000-step plan ~0.08 s more). ``conn`` None: none known. ``preload``
    False: none read at once (a watch cycle asks only for the few steps its change reaches).

    ``steps``: the pipeline's step ids now. A key does not name its step (it is the type, the
    arguments and the inputs), so a step renamed, or moved under another id, has the result
    its key has under the id it had: a key one of the pipeline's steps no longer in ``steps``
    completed answers it (docs/state.md). None: results are found under their own step only.
    ``step_ids``: the step ids the pipeline's executions hold, if known (Journal.step_ids),
    else they are read at the first miss."""

    def __init__(
        self,
        conn: sqlite3.Connection | None,
        pipeline: str,
        *,
        preload: bool = True,
        steps: Collection[str] | None = None,
        step_ids: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self._conn, self._pipeline = conn, pipeline
        self._step_ids = step_ids
        self._steps = None if steps is None else frozenset(steps)
        self._moved: dict[str, str] | None = None  # key -> the gone step that completed it
        self._known: dict[tuple[str, str], CachedResult | None] = {}
        self._fresh: set[str] = set()  # steps known to have had no result (see ``fresh``)
        self._fresh_pipeline = False  # no step of it has any (a first run)
        # The latest run's rows as read, decoded when asked for: a 100,000-element for_each's
        # results decoded up front, and remembered after, held ~0.9 KB an element.
        self._rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        if conn is not None and preload:
            latest = conn.execute(
                "SELECT id FROM runs WHERE pipeline=? ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (pipeline,),
            ).fetchone()
            if (
                latest is None
                and conn.execute(_ANY_RESULT_OF_PIPELINE, (pipeline,)).fetchone() is None
            ):
                # A first run: every step misses, without a query each (1,000 steps: ~25 ms),
                # as ``fresh`` says of a step's elements (and with the same caveat).
                self._fresh_pipeline = True
            if latest is not None:
                once: dict[Any, Any] = {}  # a text many rows repeat (a step id, "[]") held once
                for step_id, key, output, *rest in conn.execute(
                    _RESULTS_OF_RUN, (rows_run(conn, latest[0]), pipeline)
                ):
                    self._rows[(once.setdefault(step_id, step_id), key)] = (
                        key,
                        output,
                        *(once.setdefault(v, v) for v in rest),
                    )  # (the latest of a key last)

    @property
    def first_run(self) -> bool:
        """Whether no step of the pipeline has a result yet (every step will run)."""
        return self._fresh_pipeline

    def get(self, where: tuple[str, str], *, keep: bool = True) -> CachedResult | None:
        """The result for (step_id, key), or None. ``keep`` False: not remembered for a later
        ask (which queries again), as a for_each's element, which asks once, needs."""
        if where in self._known:  # (what a plan computed, a miss already asked)
            return self._known[where]
        if self._fresh_pipeline:
            return None  # not remembered either: a for_each's keys are asked once each
        if where[0] in self._fresh:
            return self._renamed(where[1])
        read = self._rows.pop(where, None)
        if read is not None:
            found = _result(*read)
            if keep:
                self._known[where] = found
            return found
        row = None
        if self._conn is not None:
            row = self._conn.execute(_RESULT, (self._pipeline, *where)).fetchone()
        hit = None if row is None else _result(where[1], *row)
        if hit is None:
            hit = self._renamed(where[1])
        if keep or hit is None:  # a miss is remembered: the key's execution is this run's
            self._known[where] = hit
        return hit

    def _renamed(self, key: str) -> CachedResult | None:
        """The result ``key`` has under a step id the pipeline no longer has (a rename).
        The keys of those steps are read once, on the first miss: a miss then costs a set
        lookup, and most pipelines have no such step."""
        if self._conn is None or self._steps is None:
            return None
        if self._moved is None:
            self._moved = {}
            ids: Collection[str]
            if self._step_ids is not None:
                ids = self._step_ids()
            else:
                ids = [sid for (sid,) in self._conn.execute(_STEP_IDS, (self._pipeline,))]
            gone = [sid for sid in ids if sid not in self._steps]
            for sid in gone:
                for (k,) in self._conn.execute(_KEYS_OF_STEP, (self._pipeline, sid)):
                    self._moved[k] = sid
        old = self._moved.get(key)
        if old is None:
            return None
        row = self._conn.execute(_RESULT, (self._pipeline, old, key)).fetchone()
        return None if row is None else _result(key, *row)

    def __setitem__(self, where: tuple[str, str], hit: CachedResult) -> None:
        self._known[where] = hit

    def fresh(self, step_id: str) -> None:
        """Ask once whether ``step_id`` has any result; when it has none, every key of it
        misses for the rest of the run without a query each (the first run of a 100,000-element
        for_each made 100,000, ~20 us each), as a miss, once asked, is remembered: an element
        whose key an earlier one of the run completed runs too. A result another process
        records meanwhile is not seen: that key runs here as well, as when both run at once."""
        if self._conn is None or self._fresh_pipeline or step_id in self._fresh:
            return
        if self._conn.execute(_ANY_RESULT, (self._pipeline, step_id)).fetchone() is None:
            self._fresh.add(step_id)


def _result(
    key: str,
    output: str | None,
    artifacts: str | None,
    files: str | None,
    status: str,
    run_id: str,
    report: str | None,
) -> CachedResult:
    value = loads(output)
    if type(value) is dict:
        # Its field names as the one string each that every output of the step then shares
        # (decoded, each output had its own: ~170 B of a hash element's 490).
        value = {sys.intern(k): v for k, v in value.items()}
    return CachedResult(
        key,
        value,
        loads(artifacts) or [],
        loads(files) or {},
        status,
        run_id,
        loads(report),
    )


# A run as its readers see it: every column but ``repeats``, where its execution rows are kept
# (state/repeats.py), which only the journal's own readers follow.
RUN_COLUMNS = (
    "id, pipeline, pipeline_file, item, status, kind, parent_run_id, params, created_at, "
    "finished_at, exit_code, current_phase, reason, provider_profile, reference_asset, pid, "
    "progress, cancel_requested"
)
AMBIGUOUS_SHOWN = 10  # candidates an ambiguous run id prefix names


def ambiguous_run(prefix: str, rows: Sequence[Mapping[str, Any]]) -> UsageError:
    """The error for a run id prefix that begins several runs: each candidate with its pipeline
    and status, so the user can pick one by a longer prefix."""
    shown = [f"{r['id']} ({r['pipeline']}, {r['status'] or '?'})" for r in rows[:AMBIGUOUS_SHOWN]]
    count = f"more than {AMBIGUOUS_SHOWN}" if len(rows) > AMBIGUOUS_SHOWN else str(len(rows))
    return UsageError(
        f"run '{prefix}' is ambiguous: it begins {count} runs: {', '.join(shown)}",
        hint="give more of the id (or 'latest' for the newest run)",
    )


class Journal(CallLedger):
    """One SQLite journal. Open with ``Journal.open(state_dir)``; close when done."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        super().__init__(conn, path)
        # pipeline -> (PRAGMA data_version, the step ids its executions hold): see step_ids
        self._step_ids: dict[str, tuple[int, set[str]]] = {}

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
            from ..source.termtext import shown_path  # as the user opens it from there

            raise NotFound(f"no journal at {shown_path(path)} (nothing has run here yet)")
        state_dir.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                path,
                timeout=30.0,
                isolation_level=None,
                check_same_thread=False,
                factory=MaskedConnection,  # known secrets never enter the journal
            )
            conn.text_factory = lenient_text  # a damaged cell reads, verify names it
            wal_mode(conn, path)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA foreign_keys=ON")
            # A checkpoint every ~40 MB of log, not SQLite's ~4 MB: a run of many small rows
            # (a for_each of 100,000) rewrote its random key-index pages into the database at
            # every checkpoint (12 us an element of 94). Nothing is less safe for it: a commit
            # in the log outlives a crash of the process as one checkpointed does, and with
            # synchronous=NORMAL neither is synced before the checkpoint.
            conn.execute("PRAGMA wal_autocheckpoint=10000")
            # 8 MiB of page cache, not SQLite's 2: the key index of a 100,000-element for_each
            # (~10 MB) was read back page by page after each commit (1.8 reads an element).
            # Pages are cached as they are read, so a small journal costs no more.
            conn.execute("PRAGMA cache_size=-8192")
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

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ----------------------------------------------------------------------------

    def _migrate(self) -> None:
        migrate(self.conn)

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
        """The run ``run_id`` names: its id, ``latest`` (the newest run), or a unique prefix of
        its id, as git takes commits. Raises NotFound; UsageError for a prefix several runs
        share, naming them (newest first)."""
        row = self._one(f"SELECT {RUN_COLUMNS} FROM runs WHERE id=?", (run_id,))
        if row is not None:
            return row
        if run_id == "latest":
            row = self._one(
                f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1"
            )
            if row is None:
                raise NotFound("no run yet: 'latest' names none", hint="runner apply makes one")
            return row
        # substr, not LIKE: a % or _ the user typed is a character of the id, not a wildcard
        rows = self._all(
            "SELECT id, pipeline, status FROM runs WHERE substr(id, 1, ?) = ? "
            "ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (len(run_id), run_id, AMBIGUOUS_SHOWN + 1),
        )
        if len(rows) == 1 and run_id:
            return self.get_run(rows[0]["id"])
        if len(rows) > 1 and run_id:
            raise ambiguous_run(run_id, rows)
        raise NotFound(f"unknown run '{run_id}'", hint="list runs with: runner runs list")

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
            f"SELECT {RUN_COLUMNS} FROM runs{clause} ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (*args, limit),
        )

    def active_runs(self, pipeline: str, item: str | None) -> list[dict[str, Any]]:
        return self._all(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE pipeline=? AND item IS ? AND status IN "
            "('running','awaiting_human','awaiting_batch') ORDER BY created_at DESC",
            (pipeline, item),
        )

    # -- executions ----------------------------------------------------------------------------

    def start_execution(self, row: Mapping[str, Any]) -> int:
        self._write()
        return self._insert_execution(row)

    def start_execution_after(self, row: Mapping[str, Any], held: int) -> int | None:
        """``start_execution`` of ``row``, the ``held`` ids before its own left to rows written
        later (``add_executions``, ``first_id``: the one returned), as written first. Only in
        a write transaction (a batch: no other connection writes until it commits, and SQLite
        never gives a new row an id below the largest); else None, nothing written."""
        self._write()
        if not self.conn.in_transaction:
            return None
        (top,) = self.conn.execute("SELECT max(id) FROM executions").fetchone()
        first = int(top or 0) + 1
        self._insert_execution({"id": first + held, **row})
        return first

    def _insert_execution(self, row: Mapping[str, Any]) -> int:
        cols = ",".join(row)
        marks = ",".join("?" for _ in row)
        values = list(row.values())
        cur = self._do(
            lambda: self.conn.execute(f"INSERT INTO executions ({cols}) VALUES ({marks})", values)
        )
        known = self._step_ids.get(row.get("pipeline", ""))
        if known is not None and row.get("step_id") is not None:
            known[1].add(row["step_id"])
        return int(cur.lastrowid or 0)

    def add_executions(
        self,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
        *,
        first_id: int | None = None,
    ) -> None:
        """Execution rows of one shape (``columns``, the engine's own names) in one statement;
        their ids are in the order of ``rows``, as one start_execution each would give (from
        ``first_id`` on, when given: ids ``start_execution_after`` left)."""
        if first_id is not None:
            columns = ("id", *columns)
            rows = [(first_id + i, *row) for i, row in enumerate(rows)]
        cols, marks = ",".join(columns), ",".join("?" for _ in columns)
        self._many(f"INSERT INTO executions ({cols}) VALUES ({marks})", rows)
        if self._step_ids and "pipeline" in columns:
            p, s = columns.index("pipeline"), columns.index("step_id")
            for row in rows:
                known = self._step_ids.get(row[p])
                if known is not None:
                    known[1].add(row[s])

    def step_ids(self, pipeline: str) -> set[str]:
        """The step ids the pipeline's executions hold (and maybe some whose rows were deleted
        since: a step id with no row answers no lookup). Read once (a probe of the index per
        step id, ~3 ms for 1,000), then kept while no other connection writes the journal
        (PRAGMA data_version), with the ids this connection's own rows add (start_execution,
        add_executions: every row the engine writes). A watch cycle's first miss needs them."""
        (version,) = self.conn.execute("PRAGMA data_version").fetchone()
        known = self._step_ids.get(pipeline)
        if known is None or known[0] != version:
            ids = {sid for (sid,) in self.conn.execute(_STEP_IDS, (pipeline,))}
            known = self._step_ids[pipeline] = (version, ids)
        return known[1]

    def finish_executions(self, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        """Execution rows of one shape rewritten in one statement: each row holds the values
        of ``columns`` (the engine's own names), then the execution's id."""
        sets = ",".join(f"{c}=?" for c in columns)
        self._many(f"UPDATE executions SET {sets} WHERE id=?", rows)

    def finish_execution(self, exec_id: int, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        self._write()
        values = [*fields.values(), exec_id]
        self._do(lambda: self.conn.execute(f"UPDATE executions SET {sets} WHERE id=?", values))

    def cached_results(
        self, pipeline: str, *, preload: bool = True, steps: Collection[str] | None = None
    ) -> CachedResults:
        """The completed (or partial) executions of a pipeline by (step_id, key), looked up as
        they are asked for (``steps``: see CachedResults)."""
        return CachedResults(
            self.conn,
            pipeline,
            preload=preload,
            steps=steps,
            step_ids=lambda: self.step_ids(pipeline),
        )

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        held = self.rows_run(run_id)
        rows = self._all("SELECT * FROM executions WHERE run_id=? ORDER BY id", (held,))
        if held != run_id:  # a no-op that repeats another's rows (state/repeats.py)
            run = self._one("SELECT id, created_at, finished_at FROM runs WHERE id=?", (run_id,))
            rows = as_own(rows, run or {"id": run_id, "created_at": None, "finished_at": None})
        for row in rows:
            self.fill_cached(row)
        return rows

    def rows_run(self, run_id: str) -> str:
        """The run whose execution rows are ``run_id``'s: itself, or the run it repeats (an
        unchanged no-op journaled compactly, state/repeats.py)."""
        return rows_run(self.conn, run_id)

    def fill_cached(self, row: dict[str, Any]) -> None:
        """A cached execution the no-op fast path journaled names its result by key only (its
        rows are written without reading each result): give it that result's output and
        contract, as the full path's cached rows carry them."""
        if row.get("status") != "cached" or row.get("output") is not None or not row.get("key"):
            return
        found = self.conn.execute(
            "SELECT output, contract FROM executions WHERE pipeline=? AND step_id=? AND key=? "
            "AND status IN ('completed','partial') ORDER BY id DESC LIMIT 1",
            (row["pipeline"], row["step_id"], row["key"]),
        ).fetchone()
        if found is None:  # a renamed step's result is under the id it had (CachedResults)
            found = self.conn.execute(
                "SELECT output, contract FROM executions WHERE pipeline=? AND key=? "
                "AND status IN ('completed','partial') ORDER BY id DESC LIMIT 1",
                (row["pipeline"], row["key"]),
            ).fetchone()
        if found is not None:
            row["output"], row["contract"] = found[0], row.get("contract") or found[1]

    def workers(self, run_id: str) -> dict[str, dict[str, int]]:
        """Where each step of a run ran: step -> {worker address: executions}; empty for a run
        whose bodies all ran in the coordinator (the local executor)."""
        out: dict[str, dict[str, int]] = {}
        for row in self._all(
            "SELECT step_id, worker, COUNT(*) AS n FROM executions WHERE run_id=? "
            "AND worker IS NOT NULL GROUP BY step_id, worker",
            (self.rows_run(run_id),),
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

    def mark_failed(self, run_id: str, reason: str) -> None:
        """Run ``run_id``, if still `running`, fails with ``reason`` (its running executions
        are interrupted): the engine stopped on an error it did not expect."""
        from .interrupt import mark_interrupted

        self._write()
        mark_interrupted(self.conn, "id=?", (run_id,), reason=reason, status="failed")
        self.commit()

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
        own = self._all(
            "SELECT * FROM events WHERE run_id=? AND seq>? ORDER BY seq", (run_id, after)
        )
        held = self.rows_run(run_id)
        return own if held == run_id else events_of(self.conn, run_id, held, after, own)

    # -- file hash cache -----------------------------------------------------------------------

    def file_hashes(self) -> dict[str, tuple[int, int, int, int, str]]:
        """path -> (size, mtime_ns, ctime_ns, inode, sha256) of each file hashed before."""
        return {
            r[0]: (r[1], r[2], r[3], r[4], r[5])
            for r in self.conn.execute(
                "SELECT path, size, mtime_ns, ctime_ns, inode, sha256 FROM file_hashes"
            )
        }

    def save_file_hashes(self, rows: list[tuple[str, int, int, int, int, str]]) -> None:
        """Rows of (path, size, mtime_ns, ctime_ns, inode, sha256)."""
        self._many(
            "INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, ctime_ns, inode, sha256) "
            "VALUES (?,?,?,?,?,?)",
            rows,
        )
