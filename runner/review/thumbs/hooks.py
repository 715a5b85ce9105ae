"""After an apply of a pipeline with image steps: the finals in the run folder, copy --out, show."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...errors import StoreError
from ...state.iterations import iterations_of
from ...state.runfolder import sniff_ext as sniff_ext


def after_apply(
    plan: Any, state: Any, report: Any, *, out_dir: str | None, as_json: bool
) -> dict[str, Any]:
    image_steps = [sid for sid in plan.order if plan.steps[sid].uses == "image"]
    if not image_steps:
        return {}
    # The engine settled the run's status from its iterations before it ended (ImageStep's
    # settle_run): read what it recorded, never decide again.
    its = iterations_of(state.journal, report.run_id)
    status, code = report.status.value, report.exit_code
    profile = state.journal.get_run(report.run_id).get("provider_profile")
    from ...state.runfolder import last_run_edits, refresh

    refresh(state, report.run_id)  # read-only views of the store: no copies
    for path in last_run_edits(state, plan.name, report.item, before=report.run_id):
        from ...source.termtext import (
            safe,  # a file name is data
            shown_path,
        )

        click.echo(
            safe(
                f"note: {shown_path(path)} (an earlier run's final) was edited by hand; this "
                "run uses the recorded final (runner verify lists it)"
            ),
            err=True,
        )
    if carry_pick(state, report.run_id, plan.name, report.item):
        its = iterations_of(state.journal, report.run_id)
    files = []
    if out_dir:
        files = copy_finals(state, its, Path(out_dir), report.item or plan.name)
    from .view import render_run, run_json

    if not as_json:
        click.echo(
            render_run(state, report.run_id, with_preview=True, stream=sys.stdout),
            nl=False,
            color=True,
        )
    doc = run_json(state, report.run_id)
    run = {
        "id": report.run_id,
        "pipeline": plan.name,
        "status": status,
        "item": report.item,
        "parent_run_id": doc["run"].get("parent_run_id"),
        "reference_asset": doc["run"].get("reference_asset"),
        "provider_profile": profile,
    }
    extra: dict[str, Any] = {"run": run, "iterations": doc["iterations"], "exit_code": code}
    if out_dir:
        extra["out"] = [str(f) for f in files]
    return extra


def carry_pick(state: Any, run_id: str, pipeline: str, item: str | None) -> bool:
    """A run that reuses the iteration picked last for its item (an unchanged re-apply makes
    the same call, answered from the journal) shows that pick too. True when one was carried."""
    from ...state.iterations import pick

    its = iterations_of(state.journal, run_id)
    if any(it.picked for it in its):
        return False
    rows = state.journal.query(
        "SELECT i.idempotency_key, i.raw FROM iterations i JOIN runs r ON r.id = i.run_id "
        "WHERE r.pipeline=? AND r.item IS ? AND i.picked=1 AND i.run_id != ? "
        "ORDER BY r.created_at DESC, r.id DESC LIMIT 1",
        (pipeline, item, run_id),
    )
    if not rows:
        return False
    same = [
        it
        for it in its
        if it.status == "completed"
        and it.idempotency_key == rows[0]["idempotency_key"]
        and it.raw == rows[0]["raw"]
    ]
    if not same:
        return False
    pick(state.journal, run_id, str(same[0].ordinal))
    return True


def copy_finals(
    state: Any,
    its: list[Any],
    dest: Path,
    stem: str,
    *,
    raw: bool = False,
    only_compliant: bool = True,
    overwrite: bool = True,
) -> list[Path]:
    """Copy (never move) finals (or raws) to dest/<stem>-<ordinal>.<ext>. Raises StoreError,
    and UsageError (before writing anything) when ``overwrite`` is off and a file of that name
    holds other bytes: an earlier export of another run, or anything else."""
    from ...source.paths import inside

    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {dest}: {exc.strerror}") from None
    safe_stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem).strip(".") or "image"
    plan: list[tuple[str, Path]] = []
    for it in its:
        if it.status != "completed" and only_compliant:
            continue
        digest = it.raw if raw else it.image  # no finalize step: the raws are the images
        if not digest:
            continue
        ext = sniff_ext(state.objects.path(digest)) if digest != it.final else (it.ext or "jpg")
        name = f"{safe_stem}-{it.ordinal}.{ext.lstrip('.')}"
        plan.append((digest, inside(dest, name)))
    if not overwrite:
        taken = [t for d, t in plan if t.exists() and not _same_bytes(state.objects.path(d), t)]
        if taken:
            from ...errors import UsageError
            from ...source.termtext import shown_path

            what = shown_path(taken[0]) + (
                f" and {len(taken) - 1} more files exist" if len(taken) > 1 else " exists"
            )
            raise UsageError(
                f"{what} with other content (an earlier export of another run?); "
                "nothing was written",
                hint="pass --overwrite to replace them, or export to another folder",
            )
    out = []
    for digest, target in plan:
        try:
            state.objects.copy_to(digest, target)  # hashed while copied: never a damaged one
        except OSError as exc:
            raise StoreError(f"cannot write {target}: {exc.strerror}") from None
        out.append(target)
    return out


def _same_bytes(a: Path, b: Path) -> bool:
    import filecmp

    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def export_run(
    state: Any,
    target: str,
    dest: Path,
    *,
    raw: bool = False,
    picked: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """`runner export`: copy a run's (or one iteration's, or its picked one's) completed finals
    or raws to ``dest``. Files there with other content are never replaced unless ``overwrite``.

    Raises NotFound for an unknown id, UsageError when nothing completed, nothing is picked, or
    a file would be overwritten; StoreError when ``dest`` cannot be written. Returns the --json
    document.
    """
    from ...errors import UsageError
    from ...state.iterations import heal_lost, iterations_of, resolve_target
    from ...state.runfolder import edited

    run, it = resolve_target(state.journal, target)
    its = [it] if it is not None else iterations_of(state.journal, run["id"])
    heal_lost(state.journal, state.objects, its)
    if picked:
        its = [i for i in its if i.picked]
        if not its:
            raise UsageError(
                f"run {run['id']} has no picked iteration",
                hint=f"pick one first: runner pick {run['id']} <ordinal>",
            )
    completed = [i for i in its if i.status == "completed"]
    if not completed and any(i.status == "lost" for i in its):
        raise UsageError(
            f"run {run['id']}'s images were lost from the object store (runner verify --repair "
            "marked them); they come back when an apply makes them again",
            hint=f"runner apply {run['pipeline_file'] or 'PIPELINE'}, then export again",
        )
    if not completed:
        raise UsageError(
            f"run {run['id']} has no completed iteration to export",
            hint=f"see: runner runs show {run['id']}",
        )
    files = copy_finals(
        state, completed, dest, run["item"] or run["pipeline"], raw=raw, overwrite=overwrite
    )
    if not files:  # never "done" having written nothing
        raise UsageError(
            f"run {run['id']}'s completed iterations hold no image to export",
            hint=f"see: runner runs show {run['id']}",
        )
    return {
        "run_id": run["id"],
        "iteration_id": it.id if it else (completed[0].id if picked else None),
        "raw": raw,
        # what was written: finals, or the provider's raws (asked for with --raw, or the
        # pipeline has no finalize step: its raws are its images)
        "images": "raw" if raw or all(i.shows_raw for i in completed) else "final",
        "picked": picked,
        "files": [str(f) for f in files],
        # run-folder finals edited by hand: what was exported is the recorded final
        "edited_in_run_folder": [] if raw else [str(p) for p in edited(state, run["id"])],
        "exit_code": 0,
    }
