"""The run view for image runs: header with lineage, iteration table, preview, contact sheet."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..engine.gates import decisions
from ..runview import run_view
from .records import Iteration, iterations_of

STAR, TICK, CROSS = "★", "✓", "✗"


def reference_of(run: dict[str, Any]) -> dict[str, Any] | None:
    ref = run.get("reference_asset")
    if not ref:
        return None
    try:
        value = json.loads(ref)
    except json.JSONDecodeError:
        value = {"sha256": ref}
    return value if isinstance(value, dict) else {"sha256": str(value)}


def final_path(state: Any, it: Iteration, raw: bool = False) -> Path | None:
    """The readable copy under runs/<run>/ when it exists, else the object itself."""
    digest = it.raw if raw else it.final
    if not digest:
        return None
    if not raw:
        named: Path = state.dir / "runs" / it.run_id / f"final-{it.ordinal}.{it.ext or 'jpg'}"
        if named.is_file():
            return named
    if not state.objects.has(digest):  # missing, or damaged (then set aside): nothing to show
        return None
    path: Path = state.objects.path(digest)
    return path


def run_json(state: Any, run_id: str) -> dict[str, Any]:
    view = run_view(state, run_id)
    doc = view.to_json()
    run = doc["run"]
    run["reference_asset"] = reference_of(view.run)
    its = iterations_of(state.journal, view.run["id"])
    doc["decisions"] = [d.to_json() for d in decisions(state.journal, view.run["id"])]
    doc["iterations"] = [
        {**it.to_json(), "final_path": str(final_path(state, it)) if it.final else None}
        for it in its
    ]
    return doc


def header_lines(state: Any, run: dict[str, Any], children: list[str]) -> list[str]:
    lines = [
        f"Run        {run['id']}  ({run.get('kind') or 'run'})",
        f"Pipeline   {run['pipeline']}",
        f"Item       {run['item'] or '-'}",
        f"Status     {run['status']}" + (f"  ({run['reason']})" if run.get("reason") else ""),
    ]
    if run.get("provider_profile"):
        lines.append(f"Provider   {run['provider_profile']}")
    if run.get("parent_run_id"):
        lines.append(f"Parent run {run['parent_run_id']}")
    ref = reference_of(run)
    if ref:
        lines.append(
            f"Reference  {ref.get('sha256', '')[:12]}"
            + (f"  (iteration {ref['iteration_id']})" if ref.get("iteration_id") else "")
        )
    if children:
        lines.append("Child runs " + ", ".join(children))
    return lines


def table_lines(state: Any, its: list[Iteration]) -> list[str]:
    lines = [
        f"{'#':>3}  {'status':<10} {'compliant':<9} {'seed':>6}  {'key':<12}  {'final':<60} pick"
    ]
    for it in its:
        comp = "-" if it.compliant is None else (f"{TICK} yes" if it.compliant else f"{CROSS} no")
        path = final_path(state, it)
        seed = "-" if it.seed is None else str(it.seed)
        where = str(path) if path else "-"
        star = STAR if it.picked else ""
        lines.append(
            f"{it.ordinal:>3}  {it.status:<10} {comp:<9} {seed:>6}  "
            f"{it.idempotency_key[:12]:<12}  {where:<60} {star}"
        )
        if it.error:
            lines.append(f"     {it.error}")
    return lines


def preview(
    state: Any, its: list[Iteration], stream: TextIO | None = None, sheet_dir: Path | None = None
) -> tuple[str, Path | None]:
    """The terminal preview (grid or numbered table) and the contact sheet path, if written."""
    from ..imaging.preview import Tile, render_preview

    tiles = [
        Tile.for_iteration(
            final_path(state, it) or Path("-"),
            ordinal=it.ordinal,
            picked=it.picked,
            compliant=it.compliant,
        )
        for it in its
        if it.final
    ]
    if not tiles:
        return "", None
    text = render_preview(tiles, stream or sys.stdout)
    sheet = None
    if sheet_dir is not None:
        from ..imaging.contact_sheet import make_contact_sheet

        sheet = make_contact_sheet(tiles, sheet_dir / "contact-sheet.png")
    return text, sheet


def decision_lines(state: Any, run_id: str) -> list[str]:
    rows = decisions(state.journal, run_id)
    if not rows:
        return []
    lines = ["", "Decisions"]
    for d in rows:
        what = d.decision.value if d.decision else "pending"
        who = f" by {d.by}" if d.by else ""
        when = (
            time.strftime(" %Y-%m-%d %H:%M", time.localtime(d.decided_at)) if d.decided_at else ""
        )
        note = f": {d.comment}" if d.comment else ""
        extra = f" {d.input}" if d.input else ""
        lines.append(f"  {d.gate} round {d.round}: {what}{who}{when}{note}{extra}")
    return lines


def render_run(state: Any, run_id: str, *, with_preview: bool, stream: TextIO | None = None) -> str:
    view = run_view(state, run_id)
    its = iterations_of(state.journal, view.run["id"])
    lines = header_lines(state, view.run, view.children)
    lines.append("")
    if its:
        lines.extend(table_lines(state, its))
        lines.extend(view.call_lines())
    else:
        return (
            view.render_text()
            + "\n".join(decision_lines(state, view.run["id"]))
            + ("\n" if decisions(state.journal, view.run["id"]) else "")
        )
    out = "\n".join(lines) + "\n"
    if with_preview:
        sheet_dir = state.dir / "runs" / view.run["id"]
        text, sheet = preview(state, its, stream, sheet_dir)
        if text:
            out += "\n" + text + ("" if text.endswith("\n") else "\n")
        if sheet:
            out += f"Contact sheet: {sheet}\n"
    if any(it.status == "completed" for it in its):
        first = next(it for it in its if it.status == "completed")
        out += f"\nPick one with: runner pick {view.run['id']} <ordinal>   (e.g. {first.ordinal})\n"
    return out
