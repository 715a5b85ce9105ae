"""`runner gc`: forget old runs and delete objects nothing references any more.

Kept, whatever the age: the last K runs of every (pipeline, item), runs still running or
waiting for a human, runs with a picked iteration, and the parents of kept runs. Of a deleted
run, a completed execution whose key a kept run still uses stays (it is the cache entry the kept
run resolves to); of the executions deleted, the digests of the output files they wrote are
remembered (written.py: runner's own bytes, should they still be in the workspace). An object
stays when a remaining execution, iteration, decision or run references it, or when it is newer
than the oldest running run (an apply may be writing it). A provider batch of a deleted run is
forgotten once it is over and the ledger holds every answer it gave; a live one is kept.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from . import batchbook, repeats, written
from .records import loads

_HEX = re.compile(r"\b[0-9a-f]{64}\b")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")
# "m" is refused: minutes or months? (it meant minutes before, which nobody guessed)
_UNIT = {"s": 1, "sec": 1, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_ALWAYS_KEPT = ("running", "awaiting_human", "awaiting_batch", "cancelling")


def parse_age(text: str) -> float:
    """'30d', '12h', '45min', '90s', '2w' -> seconds. Raises UsageError (also for the ambiguous
    'm': minutes or months?)."""
    m = _AGE.match(text.lower())
    if m and m[2] in ("m", "mo", "mon", "month", "months"):
        raise UsageError(
            f"--older-than '{text}' is ambiguous (minutes or months?): "
            f"write {m[1]}min for minutes, or days ({float(m[1]) * 30:g}d) for months"
        )
    if not m or m[2] not in _UNIT:
        raise UsageError(
            f"--older-than expects a number and a unit (s, min, h, d, w), e.g. 30d, got '{text}'"
        )
    return float(m[1]) * _UNIT[m[2]]


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def run_dirs(state_dir: Path, run_id: str) -> list[Path]:
    """The files a run owns outside the journal: finals and contact sheet, call logs."""
    if not _RUN_ID.match(run_id):
        return []
    return [state_dir / "runs" / run_id, state_dir / "logs" / "runs" / run_id]


def _tree_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            continue
    return total


@dataclass
class GcResult:
    runs_deleted: list[str] = field(default_factory=list)
    runs_kept: int = 0
    executions_deleted: int = 0
    objects_deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    run_dirs_deleted: list[str] = field(default_factory=list)
    dry_run: bool = False
    # Decisions a later apply would have given again on the same inputs (the latest made at
    # each gate on each input), gone with their runs: those gates ask again.
    decisions_forgotten: list[dict[str, Any]] = field(default_factory=list)
    # Provider batches forgotten: over, of a run deleted, every answer in the ledger
    # (batchbook.droppable); a live batch is kept whatever its run.
    batches_deleted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "runs_deleted": self.runs_deleted,
            "runs_kept": self.runs_kept,
            "executions_deleted": self.executions_deleted,
            "objects_deleted": len(self.objects_deleted),
            "bytes_freed": self.bytes_freed,
            "run_dirs_deleted": self.run_dirs_deleted,
            "decisions_forgotten": self.decisions_forgotten,
            "batches_deleted": self.batches_deleted,
            "dry_run": self.dry_run,
        }


def _runs_to_delete(
    runs: list[dict[str, Any]],
    keep_last: int | None,
    older_than: float | None,
    picked: set[str],
    now: float,
) -> set[str]:
    by_group: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in runs:  # newest first
        by_group.setdefault((r["pipeline"], r["item"]), []).append(r)
    doomed: set[str] = set()
    for group in by_group.values():
        for rank, r in enumerate(group):
            beyond_k = keep_last is not None and rank >= keep_last
            old = older_than is not None and (r["created_at"] or 0) < now - older_than
            if keep_last is not None and older_than is not None:
                candidate = beyond_k and old
            else:
                candidate = beyond_k or old
            if candidate and r["status"] not in _ALWAYS_KEPT and r["id"] not in picked:
                doomed.add(r["id"])
    parents = {r["parent_run_id"] for r in runs if r["id"] not in doomed and r["parent_run_id"]}
    return doomed - parents


def collect_garbage(
    state: Any,
    *,
    keep_last: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    wait_s: float = 0.0,
) -> GcResult:
    """Delete old runs (with their executions, events, iterations, decisions) and the objects
    nothing references. ``state`` is an open engine State.

    Deletes only while no apply is using the object store (an apply reuses old objects and
    records them a moment later): waits up to ``wait_s`` seconds for running applies, then
    raises Busy. Raises UsageError for keep_last < 0.
    """
    if keep_last is not None and keep_last < 0:
        raise UsageError("--keep-last must be 0 or more")
    if dry_run:
        return _collect(state, keep_last, older_than, dry_run)
    with state.objects.alone(wait_s=wait_s, holders=lambda: _running(state.journal)):
        return _collect(state, keep_last, older_than, dry_run)


def _running(journal: Any) -> str:
    """Who holds the store: the runs marked running (for gc's Busy message)."""
    rows = journal.query("SELECT id, pid FROM runs WHERE status='running' ORDER BY created_at")
    return ", ".join(f"run {r['id']} pid {r['pid']}" for r in rows[:3])


def _collect(
    state: Any, keep_last: int | None, older_than: float | None, dry_run: bool
) -> GcResult:
    journal, objects = state.journal, state.objects
    now = time.time()
    result = GcResult(dry_run=dry_run)
    runs = journal.query(
        "SELECT id, pipeline, item, status, created_at, parent_run_id "
        "FROM runs ORDER BY created_at DESC, rowid DESC"
    )
    picked = {
        r["run_id"] for r in journal.query("SELECT DISTINCT run_id FROM iterations WHERE picked=1")
    }
    doomed = (
        _runs_to_delete(runs, keep_last, older_than, picked, now)
        if keep_last is not None or older_than is not None
        else set()
    )
    result.runs_deleted = sorted(doomed)
    result.runs_kept = len(runs) - len(doomed)
    # Keys the kept runs resolve to: their cache entries must survive. By key, whatever the
    # step: a renamed step resolves to the result its key has under the id it had (journal.py
    # CachedResults).
    # A deleted run's rows that a kept run repeats move to that run (state/repeats.py): they
    # are a kept run's rows.
    heirs = repeats.heirs(journal.conn, doomed)
    used = {
        (r["pipeline"], r["key"])
        for r in journal.query("SELECT pipeline, key, run_id FROM executions WHERE key IS NOT NULL")
        if r["run_id"] not in doomed or r["run_id"] in heirs
    }
    doomed_execs: list[int] = []
    items = {r["id"]: r["item"] for r in runs}
    gone: set[tuple[str, str | None, str]] = set()  # (pipeline, item, step) results removed
    files_cells: list[str | None] = []  # of the executions deleted: their outputs
    moved = 0  # rows of deleted runs that move to the runs repeating them (deleted with theirs)
    for rid in sorted(doomed):
        if rid in heirs:
            moved += len(journal.query("SELECT id FROM executions WHERE run_id=?", (rid,)))
            continue
        for e in journal.query(
            "SELECT id, pipeline, step_id, key, status, files FROM executions WHERE run_id=?",
            (rid,),
        ):
            if e["status"] in ("completed", "partial") and (e["pipeline"], e["key"]) in used:
                continue
            doomed_execs.append(int(e["id"]))
            files_cells.append(e["files"])
            if e["status"] in ("completed", "partial"):
                gone.add((e["pipeline"], items.get(rid), e["step_id"]))
    result.executions_deleted = len(doomed_execs) + moved
    result.decisions_forgotten = _forgotten_decisions(journal, doomed, used)
    batches = batchbook.droppable(journal, doomed)
    result.batches_deleted = len(batches)
    if not dry_run and batches:
        with journal.transaction() as conn:
            batchbook.drop(conn, batches)
    if not dry_run and doomed:
        with journal.transaction() as conn:
            repeats.rehome(conn, heirs)
            for i in range(0, len(doomed_execs), 500):
                chunk = doomed_execs[i : i + 500]
                conn.execute(
                    f"DELETE FROM executions WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            for rid in doomed:
                for table in ("events", "iterations", "decisions", "labels"):
                    conn.execute(f"DELETE FROM {table} WHERE run_id=?", (rid,))
                conn.execute("DELETE FROM runs WHERE id=?", (rid,))
            # their outputs may still be in the workspace: runner's own bytes, not hand edits
            written.remember(conn, written.outputs_of(files_cells), now)
        _remember_forgotten(state.dir, gone, now)
    referenced = _referenced(
        journal,
        exclude_execs=set(doomed_execs) if dry_run else set(),
        exclude_runs=doomed if dry_run else set(),
    )
    running = journal.query("SELECT MIN(created_at) AS t FROM runs WHERE status='running'")
    newest_allowed = running[0]["t"] if running and running[0]["t"] is not None else None
    for digest in objects.iter_digests():
        if digest in referenced:
            continue
        path = objects.path(digest)
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if newest_allowed is not None and stat.st_mtime >= newest_allowed - 1:
            continue
        result.objects_deleted.append(digest)
        result.bytes_freed += stat.st_size
        if not dry_run:
            objects.delete(digest)
    if not dry_run and result.objects_deleted:
        with journal.transaction() as conn:
            for d in result.objects_deleted:
                conn.execute("DELETE FROM artifacts WHERE digest=?", (d,))
    _delete_run_files(state.dir, doomed, {r["id"] for r in runs}, result, dry_run)
    if not dry_run and (doomed_execs or result.objects_deleted):
        # A converged run's fingerprint vouches for results and objects that may be gone now:
        # the next apply and plan take the full path, which sees what is left.
        shutil.rmtree(state.dir / "converged", ignore_errors=True)
    return result


def _forgotten_decisions(
    journal: Any, doomed: set[str], used: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The decisions of ``doomed`` runs that are the latest made at their gate on their
    inputs (what gates.remembered gives a later apply): deleted, that gate asks again. An
    approval whose gate execution a kept run uses (``used``) is not: that result answers."""
    if not doomed:
        return []
    rows = journal.query(
        "SELECT d.id, d.run_id, d.gate, d.key, d.decision, d.by, r.pipeline FROM decisions d "
        "JOIN runs r ON r.id = d.run_id WHERE d.status='decided' AND d.key IS NOT NULL "
        "ORDER BY d.decided_at, d.id"
    )
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:  # oldest first: the latest decision on each (pipeline, gate, key) wins
        latest[(r["pipeline"], r["gate"], r["key"])] = r
    return [
        {
            "pipeline": r["pipeline"],
            "gate": r["gate"],
            "decision": r["decision"],
            "by": r["by"],
            "run": r["run_id"],
        }
        for r in latest.values()
        if r["run_id"] in doomed
        and not (r["decision"] == "approve" and (r["pipeline"], r["key"]) in used)
    ]


FORGOTTEN = "gc.json"  # beside the journal: which steps' results a gc removed, and when


def _remember_forgotten(
    state_dir: Path, gone: set[tuple[str, str | None, str]], now: float
) -> None:
    """Record (pipeline, item, step) -> when, for the steps whose results were removed, so
    `plan` can say "its results were removed by gc" rather than "never ran". Merged into what
    earlier gcs recorded; written whole, atomically (gc holds the store alone)."""
    if not gone:
        return
    known = forgotten(state_dir)
    known.update(dict.fromkeys(gone, now))
    entries = [
        {"pipeline": p, "item": i, "step": s, "at": at}
        for (p, i, s), at in sorted(
            known.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])
        )
    ]
    path = state_dir / FORGOTTEN
    tmp = path.with_name(f".{FORGOTTEN}.tmp")
    tmp.write_text(json.dumps({"version": 1, "removed": entries}), encoding="utf-8")
    tmp.replace(path)


def forgotten(state_dir: Path) -> dict[tuple[str, str | None, str], float]:
    """What ``_remember_forgotten`` recorded: (pipeline, item, step) -> the time (epoch s) of
    the gc that removed that step's results; empty when no gc removed any (or the record is
    unreadable: it only sharpens a message)."""
    try:
        doc = json.loads((state_dir / FORGOTTEN).read_text(encoding="utf-8"))
        return {
            (
                str(e["pipeline"]),
                None if e["item"] is None else str(e["item"]),
                str(e["step"]),
            ): float(e["at"])
            for e in doc["removed"]
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _delete_run_files(
    state_dir: Path, doomed: set[str], known: set[str], result: GcResult, dry_run: bool
) -> None:
    """The deleted runs' directories (finals, contact sheet, call logs), and those of runs the
    journal no longer has (left by an earlier gc)."""
    ids = set(doomed)
    for parent in (state_dir / "runs", state_dir / "logs" / "runs"):
        if parent.is_dir():
            ids.update(p.name for p in parent.iterdir() if p.name not in known)
    for rid in sorted(ids):
        for d in run_dirs(state_dir, rid):
            if d.is_dir() and not d.is_symlink():
                result.bytes_freed += _tree_size(d)
                result.run_dirs_deleted.append(str(d.relative_to(state_dir)))
                if not dry_run:
                    shutil.rmtree(d, ignore_errors=True)


def _referenced(journal: Any, *, exclude_execs: set[int], exclude_runs: set[str]) -> set[str]:
    """Every object digest something still in the journal points at."""
    refs: set[str] = set()
    for e in journal.query("SELECT id, run_id, artifacts, files, output, report FROM executions"):
        if e["id"] in exclude_execs:
            continue
        # a damaged record stops gc with the way forward (deleting past it could lose objects)
        refs.update(loads(e["artifacts"]) or [])
        refs.update((loads(e["files"]) or {}).values())
        for text in (e["output"], e["report"]):  # outputs may name objects they did not declare
            if text:
                refs.update(_HEX.findall(text))
    for it in journal.query("SELECT run_id, raw, final FROM iterations"):
        if it["run_id"] not in exclude_runs:
            refs.update(d for d in (it["raw"], it["final"]) if d)
    for d in journal.query("SELECT run_id, artifact FROM decisions WHERE artifact IS NOT NULL"):
        if d["run_id"] not in exclude_runs:
            refs.add(d["artifact"])
    for c in journal.query("SELECT result FROM calls WHERE result IS NOT NULL"):
        refs.update(_HEX.findall(c["result"]))  # a paid call's result is reused on resume
    for r in journal.query(
        "SELECT id, reference_asset FROM runs WHERE reference_asset IS NOT NULL"
    ):
        if r["id"] not in exclude_runs:
            refs.add(r["reference_asset"])
    return refs
