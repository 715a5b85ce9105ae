"""A run as the user sees it: header, lineage and executions (text and JSON)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..state.records import loads


def call_json(row: dict[str, Any]) -> dict[str, Any]:
    """One journaled provider call as shown: was it submitted, the backend's id, its outcome.

    The remote id is the one the provider reported, or the id of the job a job-queue provider
    journaled in the call's meta (``remote_job``: a ComfyUI prompt_id).
    """
    job: dict[str, Any] = {}
    if row.get("meta"):
        found = (loads(row["meta"]) or {}).get("remote_job")
        job = found if isinstance(found, dict) else {}
    submitted_at = row.get("submitted_at") or job.get("submitted_at")
    attempts = row.get("attempts") or 0
    if row["status"] == "completed":  # it reached the backend (rows of earlier versions
        submitted_at = submitted_at or row.get("started_at")  # did not say so for
        attempts = max(attempts, 1)  # providers without an HTTP layer)
    return {
        "key": row["key"],
        "step_id": row["step_id"],
        "submitted": submitted_at is not None,
        "submitted_at": submitted_at,
        "remote_id": row.get("remote_id") or job.get("prompt_id"),
        # completed, failed, maybe_executed (or in_flight); "?" for a NULL verify names
        "outcome": row["status"] or "?",
        "attempts": attempts,
        "error": row.get("error"),
    }


def batch_json(row: dict[str, Any]) -> dict[str, Any]:
    """One batch row as runs show --json gives it (state/batchbook.py has its statuses)."""
    names = ("id", "step_id", "provider", "endpoint", "status", "file_id", "remote_id")
    out: dict[str, Any] = {k: row.get(k) for k in names}
    out.update(
        remote_status=row.get("remote_status"),
        total=int(row.get("total") or 0),
        done=int(row.get("done") or 0),
        failed=int(row.get("failed") or 0),
        expires_at=row.get("expires_at"),
        error=row.get("error"),
    )
    return out


@dataclass
class RunView:
    run: dict[str, Any]
    executions: list[dict[str, Any]]
    children: list[str]
    calls: list[dict[str, Any]] = field(default_factory=list)  # journal.calls rows
    batches: list[dict[str, Any]] = field(default_factory=list)  # the run's provider batches
    # what the run called each for_each element (state/labels.py): step -> index -> label
    labels: dict[str, dict[int, str]] = field(default_factory=dict)
    repeat_of: str | None = None  # the run this one repeats unchanged (state/runfold.py)

    def label_of(self, e: dict[str, Any]) -> str | None:
        element = e.get("element")
        if element is None or element == -1:
            return None
        return self.labels.get(e["step_id"], {}).get(int(element))

    def batch_lines(self) -> list[str]:
        """The run's provider batches (batch mode) as text lines (none when it made none)."""
        if not self.batches:
            return []
        lines = ["", "Provider batches"]
        for b in map(batch_json, self.batches):
            remote = f" {b['remote_id']} ({b['remote_status']})" if b["remote_id"] else ""
            lines.append(
                f"  {b['step_id']:<16} {b['id']} {b['status']:<10} {b['done']} of {b['total']}"
                f" done, {b['failed']} failed, {b['provider']}{remote}"
            )
            if b["error"]:
                lines.append(f"    {b['error']}")
        return lines

    def call_lines(self) -> list[str]:
        """The provider calls of the run as text lines (none when it made no call)."""
        if not self.calls:
            return []
        lines = [
            "",
            "Provider calls",
            f"  {'step':<16} {'outcome':<15} {'sent':<8} {'tries':>5}  call / remote id",
        ]
        for c in map(call_json, self.calls):
            sent = (
                time.strftime("%H:%M:%S", time.localtime(c["submitted_at"]))
                if c["submitted"]
                else "no"
            )
            lines.append(
                f"  {c['step_id']:<16} {c['outcome']:<15} {sent:<8} {c['attempts']:>5}  "
                f"{c['key'][:12]}" + (f" / {c['remote_id']}" if c["remote_id"] else "")
            )
            if c["error"] and c["outcome"] != "completed":
                lines.append(f"    {c['error']}")
        return lines

    def to_json(self) -> dict[str, Any]:
        run = dict(self.run)
        of = f"run {run.get('id')}"
        run["params"] = loads(run["params"], f"{of} params") if run.get("params") else {}
        run["progress"] = loads(run["progress"], f"{of} progress") if run.get("progress") else None
        run["child_run_ids"] = self.children
        run["repeat_of"] = self.repeat_of
        execs = []
        for e in self.executions:
            d = {
                k: e[k]
                for k in ("step_id", "element", "key", "status", "attempts", "duration_s", "error")
            }
            d["output"] = loads(e["output"]) if e.get("output") else None
            # how the result was made beyond its value: calls the ledger answered, edits kept
            d["report"] = loads(e["report"]) if e.get("report") else None
            if d["element"] == -1:
                d["element"] = None
            d["label"] = self.label_of(e)
            execs.append(d)
        return {
            "run": run,
            "executions": execs,
            "calls": [call_json(c) for c in self.calls],
            "batches": [batch_json(b) for b in self.batches],
        }

    def latest(self) -> list[dict[str, Any]]:
        """The newest execution of each (step, element), in the order steps first ran: a run
        resumed after a gate lists each step once, with where it stands now."""
        last: dict[tuple[str, Any], dict[str, Any]] = {}
        for e in self.executions:
            k = (e["step_id"], e["element"] if e["element"] not in (None, -1) else None)
            before = last.pop(k, None)  # re-inserted: a step that ran again moves to its place
            # A resume finds what this run already did cached: what it did is the news.
            keep = (
                e["status"] == "cached" and before is not None and before["status"] == "completed"
            )
            last[k] = before if keep and before is not None else e
        order: dict[str, int] = {}
        for e in self.executions:
            order.setdefault(e["step_id"], len(order))
        return sorted(last.values(), key=lambda e: order[e["step_id"]])

    def render_text(self) -> str:
        from .gateview import printable

        r = self.run
        lines = [
            f"Run       {r['id']}",
            f"Pipeline  {r['pipeline']}",
            f"Item      {r['item'] or '-'}",
            f"Status    {r['status']}"
            + (f" ({printable(r['reason'])})" if r.get("reason") else ""),
        ]
        if r.get("current_phase"):
            lines.append(f"Phase     {r['current_phase']}")
        if r.get("parent_run_id"):
            lines.append(f"Parent run {r['parent_run_id']}")
        if self.children:
            lines.append("Child runs " + ", ".join(self.children))
        if self.repeat_of:
            lines.append(f"Repeats   {self.repeat_of} (an unchanged re-apply: nothing ran)")
        lines.append("")
        rows = []
        for e in self.latest():
            name = e["step_id"]
            if e["element"] not in (None, -1):  # named as the run called it, as the console did
                label = self.label_of(e)
                name += f"[{e['element']}" + (f" {printable(label)}]" if label else "]")
            dur = f"{e['duration_s']:.2f}s" if e.get("duration_s") else "-"
            status = e["status"] or "?"  # NULL in a damaged journal: verify names it
            rows.append((name, status, str(e["attempts"] or 0), dur, (e["key"] or "")[:12]))
        head = ("step", "status", "attempts", "time", "key")
        w = [
            max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
            for i, h in enumerate(head)
        ]
        w[0] = min(w[0], 80 - sum(w[1:]) - 8)  # the table fits 80 columns; long ids are cut

        def line(v: tuple[str, ...]) -> str:
            name = v[0] if len(v[0]) <= w[0] else v[0][: w[0] - 1] + "…"
            return f"{name:<{w[0]}}  {v[1]:<{w[1]}}  {v[2]:>{w[2]}}  {v[3]:>{w[3]}}  {v[4]}"

        lines.append(line(head))
        for row, e in zip(rows, self.latest(), strict=True):
            lines.append(line(row))
            if e.get("error"):
                lines.append(f"    {printable(e['error'])}")
        lines.extend(self.call_lines())
        lines.extend(self.batch_lines())
        return "\n".join(lines) + "\n"


def run_view(state: Any, run_id: str) -> RunView:
    """Raises NotFound for an unknown run."""
    run = state.journal.get_run(run_id)
    execs = state.journal.executions(run["id"])
    children = [
        r["id"]
        for r in state.journal.query(
            "SELECT id FROM runs WHERE parent_run_id=? ORDER BY created_at, rowid", (run["id"],)
        )
    ]
    batches = state.journal.query(
        "SELECT * FROM batches WHERE run_id=? ORDER BY created_at, rowid", (run["id"],)
    )
    from ..state.labels import of_run
    from ..state.runfold import repeat_of

    calls = state.journal.calls(run["id"])
    labels = of_run(state.journal, run["id"])
    return RunView(run, execs, children, calls, batches, labels, repeat_of(state.journal, run))
