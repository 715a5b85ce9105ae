"""`runner verify --repair`: mend what `runner verify` finds, keeping the rest of the history.

Planned first, changed only when the user agrees (the CLI asks, or takes --yes):

- a journal SQLite cannot read (bad pages, a dropped table) is salvaged: every readable row goes
  into a new journal, the damaged file is kept as ``journal.db.damaged-<time>``;
- a journal that is missing or empty beside an object store starts again, adopting the objects
  (the ledger of paid calls is gone: that is said, not hidden);
- a record with bad JSON loses that value (an execution or call holding it counts as lost);
- a value where an object's digest belongs that is not one is no longer relied on (its execution
  or iteration is lost, a decision's artifact or an artifacts row is dropped);
- a status left NULL gets the reading that promises least (verify.NULL_STATUS);
- an object the journal relies on that is whole in the store but missing from the artifacts
  table is recorded there again;
- objects that are missing or damaged are marked lost where the journal relies on them: those
  executions stop being cache entries (the next apply re-creates them), the paid calls whose
  result was only that object are marked lost (the next apply pays for them again: listed
  before anything is changed), iterations showing them are marked lost.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError
from . import salvage
from .cells import BadCell, bad_cells, mend
from .journal import Journal
from .objects import ObjectStore
from .records import dumps
from .verify import NULL_STATUS, BadRef, bad_refs, null_statuses, referenced


@dataclass
class RepairPlan:
    state_dir: Path
    journal: str = "ok"  # ok | salvage | new
    journal_problem: str | None = None
    salvaged: dict[str, tuple[int, int]] = field(default_factory=dict)
    adopted: int = 0  # objects recorded in a new journal
    bad_json: list[tuple[str, str, int]] = field(default_factory=list)
    mended: list[BadCell] = field(default_factory=list)  # text cells rewritten as UTF-8
    lost: dict[str, str] = field(default_factory=dict)  # digest -> where it was relied on
    damaged: list[str] = field(default_factory=list)  # present but not whole (set aside)
    executions: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # paid again by the next apply
    iterations: list[str] = field(default_factory=list)
    decisions: list[int] = field(default_factory=list)
    work: Path | None = None  # the new journal waiting to replace the damaged one
    bad_refs: list[BadRef] = field(default_factory=list)  # not digests: no longer relied on
    null_status: list[tuple[str, int]] = field(default_factory=list)  # (table, rowid)
    unrecorded: list[str] = field(default_factory=list)  # whole objects the artifacts table lost

    @property
    def empty(self) -> bool:
        return self.journal == "ok" and not (
            self.bad_json
            or self.mended
            or self.lost
            or self.bad_refs
            or self.null_status
            or self.unrecorded
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "journal": self.journal,
            "journal_problem": self.journal_problem,
            "salvaged": {t: {"saved": s, "lost": lost} for t, (s, lost) in self.salvaged.items()},
            "objects_adopted": self.adopted,
            "bad_records": [{"table": t, "column": c, "rowid": r} for t, c, r in self.bad_json],
            "mended_records": [
                {"table": m.table, "column": m.column, "rowid": m.rowid} for m in self.mended
            ],
            "lost_objects": [{"digest": d, "where": w} for d, w in sorted(self.lost.items())],
            "executions_to_rerun": self.executions,
            "paid_calls_to_make_again": self.calls,
            "iterations_lost": self.iterations,
            "decision_documents_lost": self.decisions,
            "not_digests": [
                {"table": b.table, "rowid": b.rowid, "column": b.column, "where": b.label}
                for b in self.bad_refs
            ],
            "null_statuses": [
                {"table": t, "rowid": r, "becomes": NULL_STATUS[t]} for t, r in self.null_status
            ],
            "objects_recorded_again": self.unrecorded,
        }

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.journal == "salvage":
            saved = sum(s for s, _ in self.salvaged.values())
            lost = [f"{t} ({n if n >= 0 else 'all'})" for t, (_, n) in self.salvaged.items() if n]
            out.append(
                f"journal: {self.journal_problem}; salvage {saved} readable rows into a new "
                "journal (the damaged file is kept as journal.db.damaged-<time>)"
                + (f"; rows lost: {', '.join(lost)}" if lost else "")
            )
        elif self.journal == "new":
            out.append(
                f"journal: {self.journal_problem}; start a new one that keeps the "
                f"{self.adopted} objects. The ledger of paid calls is gone: the next apply of a "
                "pipeline runs (and pays for) its provider calls again"
            )
        for table, col, rowid in self.bad_json:
            out.append(f"record {table} #{rowid}: {col} is not valid JSON; it is cleared")
        for m in self.mended:
            out.append(
                f"record {m.table} #{m.rowid}: {m.column} is not UTF-8 text; its bad bytes "
                "become U+FFFD"
            )
        for b in self.bad_refs:
            then = "the row is dropped" if b.table == "artifacts" else "it is no longer relied on"
            out.append(f"{b.line()}; {then}")
        for table, rowid in self.null_status:
            out.append(f"record {table} #{rowid}: status is NULL; it becomes {NULL_STATUS[table]}")
        for digest in self.unrecorded:
            out.append(f"object {digest[:12]} is whole in the store: record it as an artifact")
        for digest, where in sorted(self.lost.items()):
            state = "damaged" if digest in self.damaged else "missing"
            out.append(f"object {digest[:12]} ({where}) is {state}")
        for e in self.executions:
            el = f"[{e['element']}]" if e["element"] not in (None, -1) else ""
            out.append(f"re-create: step {e['step_id']}{el} of run {e['run_id']} runs again")
        for c in self.calls:
            out.append(
                f"PAID AGAIN: call {c['key'][:12]} of step {c['step_id']} "
                f"({c.get('provider') or 'provider ?'}) is made again by the next apply"
            )
        return out


def plan_repair(state_dir: Path) -> RepairPlan:
    """What a repair would change (nothing is changed; a damaged journal is salvaged into a
    scratch file beside it, so the plan can name the objects the salvaged rows lost)."""
    plan = RepairPlan(state_dir)
    path = state_dir / "journal.db"
    objects = ObjectStore(state_dir / "objects")
    conn = _open_checked(state_dir, plan)
    if conn is None:
        plan.work = state_dir / "journal.db.repair"
        if plan.journal == "new":
            conn = salvage.new_journal(plan.work)
            plan.adopted = _adopt(conn, objects)
        else:
            plan.salvaged = salvage.salvage(path, plan.work)
            conn = sqlite3.connect(plan.work, isolation_level=None)
    try:
        _plan_records(conn, objects, plan)
    finally:
        conn.close()
    return plan


def _open_checked(state_dir: Path, plan: RepairPlan) -> sqlite3.Connection | None:
    """The journal's connection when it is sound; else None with ``plan.journal`` set."""
    path = state_dir / "journal.db"
    if not path.exists() or path.stat().st_size == 0:
        plan.journal = "new"
        plan.journal_problem = "journal.db is " + ("empty" if path.exists() else "missing")
        return None
    try:
        journal = Journal.open(state_dir)
    except StoreError as exc:
        plan.journal, plan.journal_problem = "salvage", exc.message
        return None
    try:
        check = journal.conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        check = str(exc)
    if check != "ok":
        journal.close()
        plan.journal, plan.journal_problem = "salvage", f"the journal is damaged: {check}"
        return None
    return journal.conn


def _adopt(conn: sqlite3.Connection, objects: ObjectStore) -> int:
    """Record every whole object of the store in a new journal's artifacts table."""
    now = time.time()
    rows = [(d, objects.size(d), now) for d in objects.iter_digests() if objects.verify(d)]
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT OR IGNORE INTO artifacts (digest, size, created_at) VALUES (?,?,?)", rows
    )
    conn.execute("COMMIT")
    return len(rows)


def _plan_records(conn: sqlite3.Connection, objects: ObjectStore, plan: RepairPlan) -> None:
    cells = list(bad_cells(conn))
    plan.bad_json = [(c.table, c.column, c.rowid) for c in cells if c.mended is None]
    plan.mended = [c for c in cells if c.mended is not None]
    plan.bad_refs = list(bad_refs(conn))
    plan.null_status = list(null_statuses(conn))
    refs = referenced(conn)
    recorded = {r[0] for r in conn.execute("SELECT digest FROM artifacts")}
    for digest, where in refs.items():
        if not objects.exists(digest):
            plan.lost[digest] = where
        elif not objects.verify(digest):
            plan.lost[digest] = where
            plan.damaged.append(digest)
        elif digest not in recorded:
            plan.unrecorded.append(digest)
    plan.unrecorded.sort()
    lost = set(plan.lost)
    bad_exec = {r for t, _, r in plan.bad_json if t == "executions"}
    bad_exec |= {b.rowid for b in plan.bad_refs if b.table == "executions"}
    for row in conn.execute(
        "SELECT id, run_id, step_id, element, artifacts, files FROM executions "
        "WHERE status IN ('completed','partial')"
    ):
        names = set(_digests(row[4])) | set(_digests(row[5]))
        if names & lost or row[0] in bad_exec:
            plan.executions.append(
                {"id": row[0], "run_id": row[1], "step_id": row[2], "element": row[3]}
            )
    bad_calls = {r for t, c, r in plan.bad_json if t == "calls" and c == "result"}
    for rowid, key, step_id, run_id, meta, result in conn.execute(
        "SELECT rowid, key, step_id, run_id, meta, result FROM calls WHERE status='completed'"
    ):
        doc = _loads(result)
        # A result that carries its content (an LLM's text) re-creates its object for free;
        # one that only names an object (an image) must be bought again.
        names = {v for v in _walk(doc) if v in lost}
        if rowid in bad_calls or (names and not (isinstance(doc, dict) and "text" in doc)):
            info = _loads(meta)
            info = info if isinstance(info, dict) else {}
            plan.calls.append(
                {"key": key, "step_id": step_id, "run_id": run_id, "provider": info.get("provider")}
            )
    bad_it = {b.rowid for b in plan.bad_refs if b.table == "iterations"}
    for rowid, it_id, raw, final in conn.execute("SELECT rowid, id, raw, final FROM iterations"):
        if {raw, final} & lost or rowid in bad_it:
            plan.iterations.append(it_id)
    bad_dec = {b.rowid for b in plan.bad_refs if b.table == "decisions"}
    for dec_id, artifact in conn.execute("SELECT id, artifact FROM decisions"):
        if artifact in lost or dec_id in bad_dec:
            plan.decisions.append(dec_id)


def apply_repair(plan: RepairPlan, *, wait_s: float = 0.0) -> None:
    """Make the planned changes (no apply may run meanwhile). Raises Busy, StoreError."""
    objects = ObjectStore(plan.state_dir / "objects")
    path = plan.state_dir / "journal.db"
    with objects.alone(wait_s=wait_s):
        target = plan.work or path
        conn = sqlite3.connect(target, timeout=30.0, isolation_level=None)
        try:
            _mark(conn, plan)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot repair the journal {target}: {exc}") from exc
        finally:
            conn.close()
        for digest in plan.damaged:
            objects.set_aside(digest)
        if plan.work is not None:
            if path.exists():
                salvage.set_aside(path)
            salvage.put_in_place(plan.work, path)
            # converged-run fingerprints vouch for a journal that is gone
            shutil.rmtree(plan.state_dir / "converged", ignore_errors=True)


def _mark(conn: sqlite3.Connection, plan: RepairPlan) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    note = f"lost objects (runner verify --repair, {when})"
    conn.execute("BEGIN IMMEDIATE")
    for table, col, rowid in plan.bad_json:
        conn.execute(f"UPDATE {table} SET {col}=NULL WHERE rowid=?", (rowid,))
    mend(conn, plan.mended)
    for table, rowid in plan.null_status:
        conn.execute(f'UPDATE "{table}" SET status=? WHERE rowid=?', (NULL_STATUS[table], rowid))
    for b in plan.bad_refs:
        if b.table == "artifacts":
            conn.execute("DELETE FROM artifacts WHERE rowid=?", (b.rowid,))
        elif b.table == "iterations":  # (lost below) and naming nothing a run folder shows
            conn.execute(f'UPDATE iterations SET "{b.column}"=NULL WHERE rowid=?', (b.rowid,))
    now = time.time()
    objects = ObjectStore(plan.state_dir / "objects")
    conn.executemany(
        "INSERT OR IGNORE INTO artifacts (digest, size, created_at) VALUES (?,?,?)",
        [(d, objects.size(d), now) for d in plan.unrecorded],
    )
    for e in plan.executions:
        conn.execute("UPDATE executions SET status='lost', error=? WHERE id=?", (note, e["id"]))
    for c in plan.calls:
        conn.execute(
            "UPDATE calls SET status='lost', error=?, result=NULL WHERE key=?",
            (dumps(note), c["key"]),
        )
    for it_id in plan.iterations:
        conn.execute("UPDATE iterations SET status='lost', error=? WHERE id=?", (note, it_id))
    for dec_id in plan.decisions:
        conn.execute("UPDATE decisions SET artifact=NULL WHERE id=?", (dec_id,))
    conn.execute("COMMIT")


def discard(plan: RepairPlan) -> None:
    """Remove a scratch journal a refused repair left behind."""
    if plan.work is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{plan.work}{suffix}").unlink(missing_ok=True)


def _loads(text: str | None) -> Any:
    import json

    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None


def _digests(text: str | None) -> list[str]:
    value = _loads(text)
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, str)]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _walk(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _walk(v)]
    if isinstance(value, list):
        return [s for v in value for s in _walk(v)]
    return []
