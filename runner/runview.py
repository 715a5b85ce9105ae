"""A run as the user sees it: header, lineage and executions (text and JSON)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class RunView:
    run: dict[str, Any]
    executions: list[dict[str, Any]]
    children: list[str]

    def to_json(self) -> dict[str, Any]:
        run = dict(self.run)
        run["params"] = json.loads(run["params"]) if run.get("params") else {}
        run["progress"] = json.loads(run["progress"]) if run.get("progress") else None
        run["child_run_ids"] = self.children
        execs = []
        for e in self.executions:
            d = {
                k: e[k]
                for k in ("step_id", "element", "key", "status", "attempts", "duration_s", "error")
            }
            d["output"] = json.loads(e["output"]) if e.get("output") else None
            if d["element"] == -1:
                d["element"] = None
            execs.append(d)
        return {"run": run, "executions": execs}

    def render_text(self) -> str:
        r = self.run
        lines = [
            f"Run       {r['id']}",
            f"Pipeline  {r['pipeline']}",
            f"Item      {r['item'] or '-'}",
            f"Status    {r['status']}" + (f" ({r['reason']})" if r.get("reason") else ""),
        ]
        if r.get("current_phase"):
            lines.append(f"Phase     {r['current_phase']}")
        if r.get("parent_run_id"):
            lines.append(f"Parent run {r['parent_run_id']}")
        if self.children:
            lines.append("Child runs " + ", ".join(self.children))
        lines.append("")
        lines.append(f"{'step':<24} {'status':<10} {'attempts':>8} {'time':>8}  key")
        for e in self.executions:
            name = e["step_id"] + (f"[{e['element']}]" if e["element"] not in (None, -1) else "")
            dur = f"{e['duration_s']:.2f}s" if e.get("duration_s") else "-"
            key = (e["key"] or "")[:12]
            lines.append(f"{name:<24} {e['status']:<10} {e['attempts'] or 0:>8} {dur:>8}  {key}")
            if e.get("error"):
                lines.append(f"    {e['error']}")
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
    return RunView(run, execs, children)
