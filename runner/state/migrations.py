"""The journal's schema: ordered migrations (sqlite-utils, PRAGMA user_version), the tables a
journal must have, and ``migrate`` bringing a journal to the latest version (a fresh one from the
generated snapshot, see snapshot.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

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


def _m8_file_ctime(db: Any) -> None:
    # A file's ctime joins its cached signature: a same-size rewrite with its mtime set back
    # (cp -p, rsync -t --inplace) keeps (size, mtime, inode) but not ctime. Rows from before
    # have none, so they match no file and are hashed again.
    db["file_hashes"].add_column("ctime_ns", int)


def _m9_batches(db: Any) -> None:
    # Batch mode (engine/run/batchdesk.py): a provider batch journaled before it is made
    # (status intent), then its uploaded file, then the service's batch id, so a crash at any
    # point re-attaches to it rather than paying for its requests twice. ``items`` holds each
    # request (its call key, the custom_id) and, once collected, its answer or failure.
    db["batches"].create(
        {
            "id": str,
            "run_id": str,
            "step_id": str,
            "provider": str,
            "endpoint": str,
            "status": str,
            "file_id": str,
            "remote_id": str,
            "remote_status": str,
            "total": int,
            "done": int,
            "failed": int,
            "expires_at": float,
            "created_at": float,
            "updated_at": float,
            "error": str,
        },
        pk="id",
    )
    db["batches"].create_index(["run_id"])
    db["batch_items"].create(
        {
            "batch_id": str,
            "key": str,
            "line": bytes,
            "status": str,
            "answer": str,
            "error": str,
        },
        pk=("batch_id", "key"),
    )
    db["batch_items"].create_index(["key"])


def _m10_override_identity(db: Any) -> None:
    # What a for_each element an edit is of is (the digest of its item): an edit follows its
    # element when the list is reordered, not the index it had (state/overrides.py).
    db["overrides"].add_column("identity", str)


def _m11_forgotten_outputs(db: Any) -> None:
    # The digests of output files whose records `runner gc` deleted (state/written.py): runner
    # still tells its own old bytes in the workspace from a hand edit after the records go.
    db["forgotten_outputs"].create(
        {"path": str, "digest": str, "forgotten_at": float}, pk=("path", "digest")
    )


def _m12_element_labels(db: Any) -> None:
    # What each for_each element was called in a run (its `label:`, or its item when a short
    # scalar: pipeline/labels.py), as the run named it: a page or `runs show` of an old run
    # names its elements though the pipeline changed since or is gone (state/labels.py).
    db["labels"].create(
        {"run_id": str, "step_id": str, "element": int, "label": str},
        pk=("run_id", "step_id", "element"),
    )


def _m13_repeated_runs(db: Any) -> None:
    # An unchanged re-apply the fingerprint answers, when the no-op before it journaled the
    # same cached rows, names that run instead of writing them all again (state/repeats.py);
    # the run before a no-op is found by an index that does not grow with the history.
    db["runs"].add_column("repeats", str)
    db["runs"].create_index(["pipeline", "item", "created_at"])


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
    "batches",
    "batch_items",
    "forgotten_outputs",
    "labels",
)

MIGRATIONS: list[Migration] = [
    _m1_core,
    _m2_iterations,
    _m3_decisions,
    _m4_gates_cancel,
    _m5_overrides,
    _m6_call_records,
    _m7_execution_worker,
    _m8_file_ctime,
    _m9_batches,
    _m10_override_identity,
    _m11_forgotten_outputs,
    _m12_element_labels,
    _m13_repeated_runs,
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
        # SQLite has rolled back itself after some errors (a full disk): a ROLLBACK then fails
        # with "no transaction is active" and hides the error that says what happened
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _snapshot_statements() -> tuple[str, ...] | None:
    from . import _schema

    # A snapshot older than the migrations (not regenerated yet) is not used: replaying is
    # always right, the snapshot only faster.
    return _schema.STATEMENTS if len(MIGRATIONS) == _schema.VERSION else None
