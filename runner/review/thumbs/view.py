"""The run view for image runs: header with lineage, iteration table, preview, contact sheet."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ...engine.run.gates import decisions
from ...source.termtext import safe, safe_block, shown_path
from ...state.iterations import Iteration, iterations_of
from ..runview import run_view

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
    """The readable copy under runs/<run>/ when it exists, else the object itself: of the
    iteration's image (its final; its raw when no finalize step made one), or with ``raw``
    of its raw."""
    from ...state.runfolder import view_name

    digest = it.raw if raw else it.image
    if not digest:
        return None
    if not raw:
        named: Path = state.dir / "runs" / it.run_id / view_name(state, it)
        if _is_view(named, state.objects.path(digest)):
            return named  # the run folder's read-only view of the object (not an edited file)
    if not state.objects.has(digest):  # missing, or damaged (then set aside): nothing to show
        return None
    path: Path = state.objects.path(digest)
    return path


def _is_view(named: Path, obj: Path) -> bool:
    try:
        a, b = named.stat(), obj.stat()
    except OSError:
        return named.is_file() and not obj.exists()  # a folder copied without its store
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) or (
        a.st_size == b.st_size and a.st_mode & 0o222 == 0  # a read-only copy (no hard links)
    )


def run_json(state: Any, run_id: str) -> dict[str, Any]:
    view = run_view(state, run_id)
    doc = view.to_json()
    run = doc["run"]
    run["reference_asset"] = reference_of(view.run)
    its = iterations_of(state.journal, view.run["id"])
    doc["decisions"] = [d.to_json() for d in decisions(state.journal, view.run["id"])]
    doc["iterations"] = [
        {
            **it.to_json(),
            "final_path": str(final_path(state, it)) if it.final else None,
            # what a person looks at: the final, else (no finalize step) the raw
            "image_path": str(final_path(state, it)) if it.image else None,
            "image": None if not it.image else ("raw" if it.shows_raw else "final"),
        }
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
    if run.get("repeat_of"):
        lines.append(f"Repeats    {run['repeat_of']} (an unchanged re-apply: nothing ran)")
    return lines


def files_dir(state: Any, its: list[Iteration]) -> Path | None:
    """The one folder holding the readable images (runs/<run>/), when every one is there."""
    paths = [final_path(state, it) for it in its if it.image]
    parents = {p.parent for p in paths if p is not None}
    return parents.pop() if len(parents) == 1 else None


def table_lines(state: Any, its: list[Iteration]) -> list[str]:
    """The iteration table (fits 80 columns); files are in the Files line or the preview."""
    lines = [f"{'#':>3}  {'status':<10} {'compliant':<9} {'seed':>6}  {'key':<12}  pick"]
    for it in its:
        comp = "-" if it.compliant is None else (f"{TICK} yes" if it.compliant else f"{CROSS} no")
        seed = "-" if it.seed is None else str(it.seed)
        star = STAR if it.picked else ""
        lines.append(
            f"{it.ordinal:>3}  {it.status or '?':<10} {comp:<9} {seed:>6}  "
            f"{it.idempotency_key[:12]:<12}  {star}".rstrip()
        )
        if it.error:
            lines.append(f"     {it.error}")
    return lines


def _named(path: Path | None) -> Path:
    """How a file is named in the preview: so that it opens from the working directory."""
    return Path("-") if path is None else Path(shown_path(path))


def preview(
    state: Any, its: list[Iteration], stream: TextIO | None = None, sheet_dir: Path | None = None
) -> tuple[str, Path | None]:
    """The terminal preview (grid or numbered table) and the contact sheet path, if written."""
    from ...steps.imaging.preview import Tile, render_preview, render_table, supports_color

    tiles = [
        Tile.for_iteration(
            final_path(state, it) or Path("-"),
            ordinal=it.ordinal,
            picked=it.picked,
            compliant=it.compliant,
        )
        for it in its
        if it.image
    ]
    if not tiles:
        return "", None
    out = stream or sys.stdout
    if supports_color(out):
        text = render_preview(tiles, out)
    else:  # the numbered table, each file named as it opens from here
        named = [replace(t, source=Path(safe(_named(t.source)))) for t in tiles]  # type: ignore[arg-type]
        text = render_table(named)
    sheet = None
    if sheet_dir is not None:
        from ...state.runfolder import place_file
        from ...steps.imaging.contact_sheet import make_contact_sheet

        # made beside, then stored and shown as a read-only view (no copy per re-apply)
        sheet_dir.mkdir(parents=True, exist_ok=True)
        made = make_contact_sheet(tiles, sheet_dir / ".contact-sheet.new.png")
        sheet = sheet_dir / "contact-sheet.png"
        place_file(state, made, sheet)
    return text, sheet


def decision_lines(state: Any, run_id: str) -> list[str]:
    from ..gateview import rounds_lines

    rows = [d.to_json() for d in decisions(state.journal, run_id)]
    return ["", "Decisions", *rounds_lines(rows)] if rows else []


def render_run(state: Any, run_id: str, *, with_preview: bool, stream: TextIO | None = None) -> str:
    view = run_view(state, run_id)
    its = iterations_of(state.journal, view.run["id"])
    lines = header_lines(state, {**view.run, "repeat_of": view.repeat_of}, view.children)
    folder = files_dir(state, its)
    if folder is not None:
        lines.append(f"Files      {shown_path(folder)}/")
    if any(it.shows_raw for it in its):  # said: these are not finals (no size, no overlay)
        lines.append("Images     as the provider made them (no finalize step finalised them)")
    from ...state.runfolder import edited

    for path in edited(state, view.run["id"]):
        lines.append(
            f"Edited     {shown_path(path)} was changed by hand; shown and exported from the "
            "store (runner verify lists it)"
        )
    lines.append("")
    if its:
        lines.extend(table_lines(state, its))
        lines.extend(view.call_lines())
    else:
        return safe_block(
            view.render_text()
            + "\n".join(decision_lines(state, view.run["id"]))
            + ("\n" if decisions(state.journal, view.run["id"]) else "")
        )
    out = safe_block("\n".join(lines) + "\n")  # ids, items, errors and file names are data
    if with_preview:
        sheet_dir = state.dir / "runs" / view.run["id"]
        text, sheet = preview(state, its, stream, sheet_dir)
        if text:  # runner's own colour codes; its file names were made inert in the tiles
            out += "\n" + text + ("" if text.endswith("\n") else "\n")
        if sheet:
            out += f"Contact sheet: {safe(shown_path(sheet))}\n"
    if any(it.status == "completed" for it in its):
        first = next(it for it in its if it.status == "completed")
        run_id = safe(view.run["id"])
        out += f"\nPick one with: runner pick {run_id} <ordinal>   (e.g. {first.ordinal})\n"
    return out
