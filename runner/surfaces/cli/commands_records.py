"""The records: `runner runs list|show` and `runner verify` (with --repair)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...errors import StoreError, UsageError
from .base import cli, emit_json, json_option, runs, state_option
from .openstate import open_state
from .termtext import echo, echo_block, safe

RUN_STATUSES = (
    "running",
    "awaiting_human",
    "awaiting_batch",
    "completed",
    "partial",
    "failed",
    "cancelled",
    "rejected",
    "interrupted",
)  # = RunStatus values (tests/state/test_records.py keeps them equal; the enum costs an import)


@runs.command("list")
@click.option("--pipeline", default=None)
@click.option(
    "--status",
    default=None,
    type=click.Choice(RUN_STATUSES),
    help="Only runs with this status.",
)
@click.option("--item", default=None)
@click.option("--awaiting", is_flag=True, help="Only runs waiting for a human decision.")
@click.option("--limit", default=20, show_default=True)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="List unchanged re-applies too (folded into the newest run of their result otherwise).",
)
@state_option
@json_option
def runs_list(
    pipeline: str | None,
    status: str | None,
    item: str | None,
    awaiting: bool,
    limit: int,
    show_all: bool,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """List recent runs, newest first, each unchanged re-apply folded into the run it repeats.

    An apply that ran nothing (every step cached, the same params and results) repeats the run
    before it: the list shows the newest of such runs once and says how many it folds (--all
    lists each). --json lists every run, each with the run it repeats (repeat_of, or null).

    Example: runner runs list --status failed
    """
    from ...state.runfold import Folded, list_folded, repeats

    filters: dict[str, Any] = {
        "pipeline": pipeline,
        "status": "awaiting_human" if awaiting else status,
        "item": item,
    }
    state = open_state(state_dir)
    try:
        if as_json:
            rows = state.journal.list_runs(limit=limit, **filters)
            keep = ("id", "pipeline", "item", "status", "kind", "created_at", "exit_code", "reason")
            of = repeats(state.journal, rows)
            listed = [{**{k: r[k] for k in keep}, "repeat_of": of[r["id"]]} for r in rows]
            emit_json({"runs": listed, "exit_code": 0})
            return
        if show_all:
            every = state.journal.list_runs(limit=limit, **filters)
            lines = [Folded(r, (), r["id"]) for r in every]
        else:
            lines = list_folded(state.journal, limit=limit, **filters)
    finally:
        state.close()
    if not lines:
        echo("no runs")
        return
    echo(f"{'RUN':<22}  {'PIPELINE':<20} {'STATUS':<15} ITEM")
    for line in lines:
        r = line.run
        run_id, pipeline, item = safe(r["id"]), safe(r["pipeline"]), safe(r["item"] or "")
        status = r["status"] or "?"  # NULL in a damaged journal: verify names it
        echo(f"{run_id:<22}  {pipeline:<20} {status:<15} {item}")
        if line.repeats:
            echo(f"{'':<24}{safe(line.note())}")


@runs.command("show")
@click.argument("run_id")
@state_option
@json_option
def runs_show(run_id: str, state_dir: str | None, as_json: bool) -> None:
    """Show one run: its header and every execution.

    Example: runner runs show 20261202-101500-ab12cd
    """
    from ...review.thumbs.view import render_run, run_json

    state = open_state(state_dir)
    try:
        run = state.journal.get_run(run_id)
        if as_json:
            emit_json({**run_json(state, run["id"]), "exit_code": 0})
        else:
            echo_block(render_run(state, run["id"], with_preview=False))
    finally:
        state.close()


@cli.command()
@state_option
@click.option(
    "--pipeline-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Verify the state directory of this pipeline.",
)
@click.option("--repair", is_flag=True, help="Mend what verify finds (asks first, see --yes).")
@click.option(
    "--yes", is_flag=True, help="With --repair: agree without being asked (needed off a terminal)."
)
@click.option(
    "--rebuild",
    is_flag=True,
    help="Run cached executions of the latest runs again in a scratch copy; compare outputs.",
)
@click.option(
    "--sample",
    type=int,
    default=10,
    show_default=True,
    help="With --rebuild: how many executions, picked at random.",
)
@click.option("--all", "every", is_flag=True, help="With --rebuild: every execution.")
@click.option(
    "--include-paid", is_flag=True, help="With --rebuild: re-run provider steps too (they pay)."
)
@click.option("--run", "run_id", default=None, help="With --rebuild: this run, not the latest.")
@json_option
def verify(
    state_dir: str | None,
    pipeline_file: Path | None,
    repair: bool,
    yes: bool,
    rebuild: bool,
    sample: int,
    every: bool,
    include_paid: bool,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Check the journal's integrity, that every referenced object is present and intact, and
    that the outputs of each pipeline's latest completed run still hold what was recorded (an
    output edited by hand is a problem; a missing one a note: apply restores it).

    --repair mends what it finds and keeps the rest of the history: a damaged journal is
    salvaged into a new one (the old file kept), a missing or empty one is started again around
    the objects, and lost or damaged objects are marked so the next apply re-creates them. It
    lists the paid calls the next apply will make again and asks before changing anything
    (off a terminal, or with --json, only --yes agrees).

    --rebuild checks instead that cached results are reproducible: it runs a sample (--all:
    every one) of the cached executions of each pipeline's latest run again, in a scratch copy
    of the project and a scratch state (the real ones are only read), each against its recorded
    inputs, and names every execution whose output differs (not deterministic); exit 1 when
    one does. Provider steps are listed as skipped unless --include-paid.

    Example: runner verify --state .runner && runner verify --rebuild --all --json
    """
    from ...engine.plan.drift import output_drift
    from ...engine.run.apply import State, state_dir_for
    from ...engine.run.locate import state_dir_here
    from ...state.verify import verify_state

    if pipeline_file is not None and not state_dir:
        state_dir = str(state_dir_for(pipeline_file))
    where = state_dir_here(state_dir)
    if rebuild:
        from .rebuildcmd import run_rebuild

        if repair:
            raise UsageError("--rebuild and --repair are separate checks: give one")
        run_rebuild(
            where,
            sample=sample,
            every=every,
            include_paid=include_paid,
            run_id=run_id,
            as_json=as_json,
        )
    elif every or include_paid or run_id is not None:
        raise UsageError("--all, --include-paid and --run go with --rebuild")
    plan_doc = None
    if repair:
        plan_doc = _repair(where, yes, as_json)
    try:
        state = State.open(where, readonly=True)
    except StoreError as exc:  # a lost or damaged journal: what verify is for
        problems, checked, drift = [str(exc)], 0, []
    else:
        try:
            problems, checked = verify_state(state)
            drift = output_drift(state.journal)  # outputs edited by hand (or missing)
        finally:
            state.close()
    problems += [str(d) for d in drift if d.found is not None]
    code = 1 if problems else 0
    if as_json:
        doc = {"ok": not problems, "problems": problems, "objects_checked": checked}
        doc["outputs"] = [d.to_json() for d in drift]
        if plan_doc is not None:
            doc["repair"] = plan_doc
        emit_json({**doc, "exit_code": code})
    else:
        for p in problems:
            echo(f"problem: {safe(p)}")
        for d in drift:
            if d.found is None:
                echo(f"note: {safe(str(d))}")
        echo(
            f"{'ok' if not problems else 'FAILED'}: {checked} objects checked, "
            f"{len(problems)} problems"
        )
        if problems and not repair:
            echo("mend them (it lists what it changes and asks): runner verify --repair")
    sys.exit(code)


def _repair(state_dir: Path, yes: bool, as_json: bool) -> dict[str, Any]:
    """Plan the repair, show it, ask, make it. Raises UsageError when not agreed to."""
    from ...state.repair import apply_repair, discard, plan_repair

    plan = plan_repair(state_dir)
    if plan.empty:
        if not as_json:
            echo("nothing to repair")
        return {**plan.to_json(), "repaired": False}
    if not as_json:
        for line in plan.lines():
            echo(f"repair: {line}")
    agreed = yes
    if not agreed and not as_json and sys.stdin.isatty():
        paid = f" The next apply pays again for {len(plan.calls)} calls." if plan.calls else ""
        agreed = click.confirm(f"Make these changes?{paid}", default=False, err=True)
    if not agreed:
        discard(plan)
        refused = UsageError(
            "nothing was changed: a repair needs your agreement",
            hint="read the list (runner verify --repair), then: runner verify --repair --yes",
        )
        if as_json:  # the plan is the point: show it with the refusal
            doc = {"repair": {**plan.to_json(), "repaired": False}, "error": refused.to_json()}
            emit_json({**doc, "exit_code": refused.exit_code})
            sys.exit(refused.exit_code)
        raise refused
    apply_repair(plan)
    return {**plan.to_json(), "repaired": True}
