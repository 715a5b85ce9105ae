"""Journaling a run the no-op fast path answered (engine/plan/fastpath.py proved nothing
changed): its run row, an execution row per step or element (or, repeating the no-op before it,
none: state/repeats.py) and its events, in one transaction through the journal's own schema with
plain SQL, so a no-op loads neither the engine nor sqlite-utils."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def journal(state_dir: Path, pipeline: Path, doc: dict[str, Any]) -> dict[str, Any] | None:
    """Journal a fully cached run for a fingerprint that held; returns the --json document, or
    None when the journal says the full path must answer: an edit of a step's output
    (`runner edit`) is active, which the engine uses or sets aside (checked in the transaction
    that journals the run, so an edit stored a moment before is never missed).

    Uses the journal's own schema through plain SQL (the journal exists: a fingerprint is only
    written after a run). Raises Busy when the item's lock is held.
    """
    import sqlite3

    from ...errors import Busy
    from ...state import repeats
    from ...state.interrupt import mark_interrupted
    from ...state.itemlock import try_hold
    from ...state.masked import MaskedConnection

    name, item = doc["name"], doc["item"]
    with try_hold(state_dir, name, item) as held:
        if not held:
            raise Busy(f"another apply of pipeline '{name}' is running")
        run_id = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()
        now = time.time()
        conn = sqlite3.connect(
            state_dir / "journal.db",
            timeout=30.0,
            isolation_level=None,
            factory=MaskedConnection,  # a no-op run's params: known secrets masked
        )
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute(
                "SELECT 1 FROM overrides WHERE pipeline=? AND status='active' LIMIT 1", (name,)
            ).fetchone():
                conn.execute("ROLLBACK")
                return None
            # As a full apply does under the item lock: runs still marked running belong to
            # processes that died.
            mark_interrupted(conn, "pipeline=? AND item IS ?", (name, item))
            rows = _cached_rows(doc)
            # what each for_each element was called, as the full path journals it
            named = {s["id"]: s["labels"] for s in doc["forecast"]["steps"] if s.get("labels")}
            labeled = [
                (step, int(element), label)
                for step, by_element in named.items()
                for element, label in by_element.items()
            ]
            # The no-op before it wrote these very rows: this run names that one's instead of
            # writing them again (state/repeats.py).
            repeated = repeats.repeatable(
                conn,
                pipeline=name,
                item=item,
                pipeline_file=str(pipeline),
                params=doc["params"],
                rows=rows,
                labels=labeled,
            )
            run_row = {
                "id": run_id,
                "pipeline": name,
                "pipeline_file": str(pipeline),
                "item": item,
                "status": "completed",
                "kind": "run",
                "params": doc["params"],
                "created_at": now,
                "finished_at": now,
                "exit_code": 0,
                "pid": os.getpid(),
                "progress": doc["progress"],
                "current_phase": doc["phase"],
            }
            if repeated:
                run_row["repeats"] = repeated
            conn.execute(
                f"INSERT INTO runs ({','.join(run_row)}) VALUES ({','.join('?' * len(run_row))})",
                tuple(run_row.values()),
            )
            if not repeated:
                conn.executemany(
                    "INSERT INTO executions (run_id, step_id, element, key, status, pipeline, "
                    "started_at, finished_at, attempts, why) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (run_id, sid, el, key, "cached", name, now, now, 0, repeats.WHY)
                        for sid, el, key in rows
                    ],
                )
                if labeled:
                    from ...state import labels

                    conn.executemany(labels.INSERT, [(run_id, *row) for row in labeled])
            insert = (
                "INSERT INTO events (run_id, ts, type, step_id, element, data) VALUES (?,?,?,?,?,?)"
            )
            started = json.dumps(
                {"pipeline": name, "item": item, "steps": len(doc["steps"]), "fast_path": True}
            )
            finished = json.dumps({"status": "completed", "exit_code": 0, "duration_s": 0.0})
            first = conn.execute(insert, (run_id, now, "RunStarted", None, None, started))
            if repeated:
                # Its StepSkipped events are the run's it repeats, numbered in the gap left
                # here (repeats.events_of).
                conn.execute(
                    "INSERT INTO events (seq, run_id, ts, type, step_id, element, data) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (
                        int(first.lastrowid or 0) + len(rows) + 1,
                        run_id,
                        now,
                        "RunFinished",
                        None,
                        None,
                        finished,
                    ),
                )
            else:
                skips = [
                    (run_id, now, "StepSkipped", sid, None if el < 0 else el, repeats.skipped(key))
                    for sid, el, key in rows
                ]
                conn.executemany(
                    insert, [*skips, (run_id, now, "RunFinished", None, None, finished)]
                )
            conn.execute("COMMIT")
        finally:
            conn.close()
    steps = []
    for s in doc["steps"]:
        entry = dict(s)
        entry["status"] = "cached"
        entry["duration_s"] = 0.0
        if "elements" in entry:
            total = entry["elements"]["total"]
            entry["elements"] = {"total": total, "cached": total}
        steps.append(entry)
    return {
        "run": {"id": run_id, "pipeline": name, "status": "completed", "item": item},
        "summary": {"ran": 0, "cached": len(steps), "skipped": 0, "failed": 0},
        "steps": steps,
        "exit_code": 0,
    }


def _cached_rows(doc: dict[str, Any]) -> list[tuple[str, int, str | None]]:
    """(step, element, key) of each execution a no-op answers: one per for_each element, as
    the full path journals them (gc keeps a result while a kept run names its key)."""
    rows: list[tuple[str, int, str | None]] = []
    for s in doc["forecast"]["steps"]:
        if s["elements"] is None:
            rows.append((s["id"], -1, s["key"]))
        else:
            rows.extend((s["id"], i, key) for i, key in enumerate(s["elements"]))
    return rows
