"""Core commands: apply, validate, graph, runs, steps, verify, init (plan, explain: elsewhere)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import NotFound, StoreError, UsageError
from .app import (
    Ctx,
    cli,
    emit_json,
    events_option,
    jobs_option,
    json_option,
    max_cost_option,
    param_option,
    parse_params,
    pipeline_arg,
    state_option,
)
from .termtext import echo, echo_block, safe


def _reporter(
    as_json: bool, total: int, events_file: str | None, quiet: bool = False, plan: Any = None
) -> Any:
    """The console reporter (with ``plan``, lines go under their phase, in pipeline order)."""
    from ..engine.events import FanOut, JsonLinesReporter
    from .app import isatty_stderr
    from .console import LiveReporter, PlainReporter, WarningsReporter

    reporters: list[Any] = []
    if quiet:
        reporters.append(WarningsReporter())  # quiet means no progress, not no warnings
    elif isatty_stderr() and not as_json:
        reporters.append(LiveReporter(total, plan=plan))
    else:
        reporters.append(PlainReporter(plan=plan))
    if events_file:
        try:
            stream = open(events_file, "a", encoding="utf-8")  # noqa: SIM115 (the reporter closes it)
        except OSError as exc:
            from ..errors import UsageError

            raise UsageError(f"--events {safe(events_file)}: {exc.strerror}") from None
        reporters.append(JsonLinesReporter(stream, close_stream=True))
    return FanOut(*reporters)


def _install_sigterm() -> None:
    # SIGTERM cancels like Ctrl-C: the run is marked cancelled, completed work is kept.
    def handler(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@cli.command()
@pipeline_arg
@param_option
@jobs_option
@click.option("--force", multiple=True, metavar="STEP", help="Re-run STEP and its downstream.")
@click.option("--dry-run", is_flag=True, help="The same as `runner plan`: run and write nothing.")
@click.option("--item", default=None, help="What this run is for (one active run per item).")
@events_option
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also copy each compliant final image to DIR/<item>-<ordinal>.<ext>.",
)
@click.option(
    "--retry-uncertain",
    is_flag=True,
    help="Send again provider calls whose reply was lost (the backend may have completed and "
    "billed them: this may pay twice).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@max_cost_option
@click.option(
    "--executor",
    type=click.Choice(["local", "dask"]),
    default=None,
    help="Where step bodies run: here, or on a Dask cluster (pip install 'runner[dask]'). "
    "Default: [executor] kind in runner.toml, else local.",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="URL",
    help="With --executor dask: an existing cluster's scheduler (tcp://HOST:8786).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="With --executor dask and no --scheduler: worker processes of a local cluster (2).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="With --executor dask and no --scheduler: threads per worker of a local cluster (1).",
)
@click.option(
    "--remote",
    default=None,
    metavar="URL",
    help="Remote cache to read (and push to, if [cache] writable): an fsspec URL.",
)
@state_option
@json_option
@click.pass_obj
def apply(
    obj: Ctx,
    file: Path,
    params: tuple[str, ...],
    jobs: int | None,
    force: tuple[str, ...],
    dry_run: bool,
    item: str | None,
    events_file: str | None,
    out_dir: str | None,
    retry_uncertain: bool,
    quiet: bool,
    max_cost: float | None,
    executor: str | None,
    scheduler: str | None,
    workers: int | None,
    threads: int | None,
    remote: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Run the pipeline, re-running only what is missing or out of date. With a budget
    (--max-cost, the pipeline's limits.max_cost or runner.toml's [budget]) the plan's estimated
    cost is checked first and an apply over it is refused (exit 9) before any call.

    Example: runner apply pipeline.yaml -p title=hello --jobs 4
    """
    from ..engine import fastpath
    from ..engine.locate import state_dir_for

    overrides = parse_params(params)
    if dry_run:
        from ..engine.plandoc import plan_document
        from .commands_plan import finish_plan

        doc, fc = plan_document(file, overrides, state_dir, force, item, max_cost)
        finish_plan(doc, fc, as_json=as_json, detailed=False)
    state_path = state_dir_for(file, state_dir)
    pipeline_path = file.resolve()
    if not (force or out_dir or events_file or retry_uncertain or max_cost is not None or remote):
        held = fastpath.check(state_path, pipeline_path, overrides, item)
        if held is not None:
            doc = fastpath.journal_noop(state_path, pipeline_path, held)
            if as_json:
                emit_json(doc)
            else:
                n = doc["summary"]["cached"]
                echo(
                    f"completed: ran 0, cached {n}, skipped 0, failed 0  "
                    f"(run {doc['run']['id']}; nothing changed)"
                )
            sys.exit(0)

    from ..engine.apply import State, apply_plan
    from ..engine.options import ApplyOptions
    from ..errors import UsageError
    from ..pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, overrides)
    for f in force:
        if f not in plan.steps:
            raise UsageError(f"--force: unknown step '{f}'")
    forced = frozenset(plan.downstream(set(force))) if force else frozenset()
    from ..engine.plandoc import check_budget_first

    check_budget_first(file, plan, overrides, state_dir, force, item, max_cost)
    from ..engine.preflight import check_out_dir

    check_out_dir(plan, out_dir)
    options = ApplyOptions(
        force=forced,
        item=item,
        retry_uncertain=retry_uncertain,
        remote=remote,
        executor=executor,
        scheduler=scheduler,
        workers=workers,
        threads=threads,
    )
    if jobs:
        options.jobs = jobs
        options.jobs_given = True
    state = State.open(state_path)
    reporter = _reporter(as_json, len(plan.order), events_file, quiet, plan)
    _install_sigterm()
    try:
        report = apply_plan(plan, state, options, reporter)
    except KeyboardInterrupt:
        reporter.close()
        state.close()
        if as_json:
            emit_json({"run": None, "exit_code": 130, "error": {"message": "cancelled"}})
        echo("cancelled; completed work is kept, the next apply resumes", err=True)
        sys.exit(130)
    reporter.close()
    try:
        if fastpath.eligible(plan, options):
            fastpath.record(state_path, pipeline_path, overrides, item, plan, report)
        else:
            fastpath.forget(state_path, pipeline_path, overrides, item)
        doc = report.to_json()
        extra = _after_apply(plan, state, report, out_dir, as_json)
        doc.update(extra)
        if as_json:
            emit_json(doc)
        else:
            from .runend import end_text

            echo_block(end_text(state, report))
    finally:
        state.close()
    sys.exit(doc.get("exit_code", report.exit_code))


def _after_apply(
    plan: Any, state: Any, report: Any, out_dir: str | None, as_json: bool
) -> dict[str, Any]:
    """Hooks for workflows that add to apply's output (thumbnail iterations, gates)."""
    if not any(s.uses == "image" for s in plan.steps.values()):
        return {}  # the hooks act on image steps only: not worth their import otherwise
    try:
        from ..thumbs.hooks import after_apply
    except ModuleNotFoundError:
        return {}
    result: dict[str, Any] = after_apply(plan, state, report, out_dir=out_dir, as_json=as_json)
    return result


@cli.command()
@pipeline_arg
@param_option
@json_option
def validate(file: Path, params: tuple[str, ...], as_json: bool) -> None:
    """Check a pipeline without running it: schema, references, expressions, cycles.

    Example: runner validate pipelines/thumbnail.yaml
    """
    from ..pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, parse_params(params))
    if as_json:
        emit_json({"pipeline": plan.name, "valid": True, "steps": len(plan.order), "exit_code": 0})
    else:
        echo(f"{file}: valid ({len(plan.order)} steps)")


@cli.command()
@pipeline_arg
@param_option
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "mermaid"]), default="text")
@click.option(
    "--run",
    "run_id",
    default=None,
    metavar="RUN",
    help="Show which Dask worker ran each step of this run (default: the pipeline's newest run).",
)
@state_option
@json_option
def graph(
    file: Path,
    params: tuple[str, ...],
    fmt: str,
    run_id: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Show the pipeline's DAG, grouped by phase; after a run on a Dask cluster, each step with
    the workers that ran it.

    Example: runner graph pipeline.yaml --format mermaid
    """
    from ..pipeline.compiler import compile_pipeline
    from ..pipeline.graphview import render_graph

    plan = compile_pipeline(file, parse_params(params))
    run, where = _where_steps_ran(file, plan.name, run_id, state_dir)
    text = render_graph(plan, fmt, where)
    if as_json:
        g = plan.graph()
        emit_json(
            {
                "pipeline": plan.name,
                "format": fmt,
                "text": text,
                "nodes": list(g.nodes),
                "edges": [list(e) for e in g.edges],
                "run": run,
                "workers": where,
                "exit_code": 0,
            }
        )
    else:
        echo_block(text)


def _where_steps_ran(
    file: Path, pipeline: str, run_id: str | None, state_dir: str | None
) -> tuple[str | None, dict[str, dict[str, int]]]:
    """(the run, step -> {worker address: executions}) for ``runner graph``: the given run, or
    the pipeline's newest; (None, {}) when nothing ran yet (no journal is created for this)."""
    from ..engine.locate import state_dir_for

    path = state_dir_for(file, state_dir)
    if not (path / "journal.db").is_file():
        if run_id is not None:
            raise NotFound(f"no run '{run_id}': there is no journal at {path}")
        return None, {}
    state = _open_state(str(path))
    try:
        if run_id is not None:
            run = state.journal.get_run(run_id)
        else:
            newest = state.journal.list_runs(pipeline=pipeline, limit=1)
            if not newest:
                return None, {}
            run = newest[0]
        return str(run["id"]), state.journal.workers(run["id"])
    finally:
        state.close()


@cli.group()
def runs() -> None:
    """Inspect runs in the journal.

    Example: runner runs list --limit 10
    """


def _open_state(state_dir: str | None, readonly: bool = True) -> Any:
    from ..engine.apply import State
    from ..engine.locate import state_dir_here

    # Commands without a pipeline file find the project from the working directory, like git.
    return State.open(state_dir_here(state_dir), readonly=readonly)


RUN_STATUSES = (
    "running",
    "awaiting_human",
    "completed",
    "partial",
    "failed",
    "cancelled",
    "rejected",
)  # = RunStatus values (tests/test_records.py keeps them equal; the enum is not worth importing)


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
@state_option
@json_option
def runs_list(
    pipeline: str | None,
    status: str | None,
    item: str | None,
    awaiting: bool,
    limit: int,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """List recent runs, newest first.

    Example: runner runs list --status failed
    """
    state = _open_state(state_dir)
    try:
        rows = state.journal.list_runs(
            pipeline=pipeline,
            status="awaiting_human" if awaiting else status,
            item=item,
            limit=limit,
        )
    finally:
        state.close()
    keep = ("id", "pipeline", "item", "status", "kind", "created_at", "exit_code", "reason")
    if as_json:
        emit_json({"runs": [{k: r[k] for k in keep} for r in rows], "exit_code": 0})
        return
    if not rows:
        echo("no runs")
        return
    echo(f"{'RUN':<22}  {'PIPELINE':<20} {'STATUS':<15} ITEM")
    for r in rows:
        run_id, pipeline, item = safe(r["id"]), safe(r["pipeline"]), safe(r["item"] or "")
        echo(f"{run_id:<22}  {pipeline:<20} {r['status']:<15} {item}")


@runs.command("show")
@click.argument("run_id")
@state_option
@json_option
def runs_show(run_id: str, state_dir: str | None, as_json: bool) -> None:
    """Show one run: its header and every execution.

    Example: runner runs show 20261202-101500-ab12cd
    """
    from ..thumbs.view import render_run, run_json

    state = _open_state(state_dir)
    try:
        run = state.journal.get_run(run_id)
        if as_json:
            emit_json({**run_json(state, run["id"]), "exit_code": 0})
        else:
            echo_block(render_run(state, run["id"], with_preview=False))
    finally:
        state.close()


@cli.command()
@click.argument("name", required=False)
@json_option
def steps(name: str | None, as_json: bool) -> None:
    """List installed step types; with NAME, its arguments (the JSON Schema of `with:`) and
    its output: each field an expression reads as `steps.ID.output.FIELD` (a for_each step's
    output is the list of its elements' outputs, `steps.ID.output[0].FIELD`).

    Example: runner steps template
    """
    from ..steps.registry import default_registry, describe

    reg = default_registry()
    names = [name] if name else reg.names()
    out: list[dict[str, Any]] = []
    for n in names:
        t = reg.get(n)
        if t is None:
            raise NotFound(f"unknown step type '{n}'")
        out.append(describe(n, t))
    if as_json:
        emit_json({"steps": out, "exit_code": 0})
        return
    for s in out:
        echo(f"{s['name']} v{s['version']}: {s['description']}")
        if name:
            echo("arguments (with:), as JSON Schema:")
            echo_block(json.dumps(s["schema"], indent=2))
            echo("output (steps.ID.output.FIELD; a for_each step: a list of these):")
            width = max((len(f) for f in s["output"]), default=0)
            for field_name, what in s["output"].items():
                echo(f"  {field_name:<{width}}  {what}")


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
@json_option
def verify(
    state_dir: str | None, pipeline_file: Path | None, repair: bool, yes: bool, as_json: bool
) -> None:
    """Check the journal's integrity, that every referenced object is present and intact, and
    that the outputs of each pipeline's latest completed run still hold what was recorded (an
    output edited by hand is a problem; a missing one a note: apply restores it).

    --repair mends what it finds and keeps the rest of the history: a damaged journal is
    salvaged into a new one (the old file kept), a missing or empty one is started again around
    the objects, and lost or damaged objects are marked so the next apply re-creates them. It
    lists the paid calls the next apply will make again and asks before changing anything
    (off a terminal, or with --json, only --yes agrees).

    Example: runner verify --state .runner && runner verify --repair --yes --json
    """
    from ..engine.apply import State, state_dir_for
    from ..engine.drift import output_drift
    from ..engine.locate import state_dir_here
    from ..verify import verify_state

    if pipeline_file is not None and not state_dir:
        state_dir = str(state_dir_for(pipeline_file))
    where = state_dir_here(state_dir)
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
    from ..repair import apply_repair, discard, plan_repair

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


@cli.command()
@click.argument(
    "directory", required=False, default=".", type=click.Path(file_okay=False, path_type=Path)
)
@json_option
def init(directory: Path, as_json: bool) -> None:
    """Create a minimal working project: a pipeline, a prompt, a .gitignore entry.

    Example: runner init myproject && cd myproject && runner apply pipeline.yaml
    """
    from ..scaffold import init_project

    created = init_project(directory)
    if as_json:
        emit_json({"directory": str(directory), "created": created, "exit_code": 0})
        return
    for c in created:
        echo(f"created {c}")
    echo(f"next: cd {directory} && runner apply pipeline.yaml")


@cli.command()
@pipeline_arg
@param_option
@click.option("--strict", is_flag=True, help="Exit 2 when there is any warning.")
@json_option
def check(file: Path, params: tuple[str, ...], strict: bool, as_json: bool) -> None:
    """Validate a pipeline and lint its rules: unused patterns and named rules, comparisons that
    can never be true for a param's declared type, a `when` reading a conditionally skipped step.

    Example: runner check pipelines/report.yaml --strict
    """
    from ..pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, parse_params(params))
    decls = plan.doc.data.get("params") or {}
    from ..rules import raw_shell_steps

    warnings = plan.rulebook.lint({k: v["type"] for k, v in decls.items()}) if plan.rulebook else []
    warnings += raw_shell_steps(plan.steps)
    code = 2 if strict and warnings else 0
    if as_json:
        emit_json(
            {
                "pipeline": plan.name,
                "warnings": [
                    {
                        "code": w.code,
                        "message": w.message,
                        "where": str(w.where) if w.where else None,
                    }
                    for w in warnings
                ],
                "exit_code": code,
            }
        )
    else:
        for w in warnings:
            echo_block(f"warning: {safe(w, lines=True)} [{w.code}]")
        echo(f"{file}: {len(warnings)} warning(s)")
    sys.exit(code)
