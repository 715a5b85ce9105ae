"""Core commands: apply, validate, graph, steps, init (plan, explain, runs, verify: elsewhere)."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from ...errors import NotFound
from .applyrun import ApplyRequest, reporter_for, run_apply
from .base import (
    CLICK_PRINTER,
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
    reask_option,
    retry_uncertain_option,
    state_option,
)
from .openstate import open_state
from .termtext import echo, echo_block, safe

# Other commands that run a plan (thumb, review) print its progress as apply does.
_reporter = reporter_for


@cli.command()
@pipeline_arg
@param_option
@jobs_option
@click.option("--force", multiple=True, metavar="STEP", help="Re-run STEP and its downstream.")
@reask_option
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
@retry_uncertain_option
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@max_cost_option
@click.option(
    "--executor",
    type=click.Choice(["local", "dask"]),
    default=None,
    help="Where step bodies run: here, or on a Dask cluster "
    "(pip install 'runner-pipelines[dask]'). Default: [executor] kind in runner.toml, else local.",
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
    reask: tuple[str, ...],
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
    request = ApplyRequest(
        file=file,
        overrides=parse_params(params),
        jobs=jobs,
        force=force,
        reask=reask,
        dry_run=dry_run,
        item=item,
        events_file=events_file,
        out_dir=out_dir,
        retry_uncertain=retry_uncertain,
        quiet=quiet,
        max_cost=max_cost,
        executor=executor,
        scheduler=scheduler,
        workers=workers,
        threads=threads,
        remote=remote,
        state_dir=state_dir,
        as_json=as_json,
        began_ns=time.time_ns(),  # before any file the fingerprint names is read
    )
    run_apply(request, CLICK_PRINTER, console=obj.console)


@cli.command()
@pipeline_arg
@param_option
@json_option
def validate(file: Path, params: tuple[str, ...], as_json: bool) -> None:
    """Check a pipeline without running it: schema, references, expressions, cycles.

    Example: runner validate pipelines/thumbnail.yaml
    """
    from ...pipeline.compiler import compile_pipeline

    # The process ends after this one compile, which makes no garbage cycles: a full collection
    # of the plan's heap as the compile ends would only cost (a tenth of a big validate).
    # (put back after: in a host process, a test's CliRunner, the collector stays as it was)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        plan = compile_pipeline(file, parse_params(params))
    finally:
        if was_enabled:
            gc.enable()
    if as_json:
        emit_json({"pipeline": plan.name, "valid": True, "steps": len(plan.order), "exit_code": 0})
    else:
        n = len(plan.order)
        echo(f"{file}: valid ({n} step{'' if n == 1 else 's'})")


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
    from ...pipeline.compiler import compile_pipeline
    from ...pipeline.graphview import render_graph

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
    from ...engine.run.locate import state_dir_for

    path = state_dir_for(file, state_dir)
    if not (path / "journal.db").is_file():
        if run_id is not None:
            from ...source.termtext import shown_path

            raise NotFound(f"no run '{run_id}': there is no journal at {shown_path(path)}")
        return None, {}
    state = open_state(str(path))
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


@cli.command()
@click.argument("name", required=False)
@json_option
def steps(name: str | None, as_json: bool) -> None:
    """List installed step types; with NAME, its arguments (the JSON Schema of `with:`) and
    its output: each field an expression reads as `steps.ID.output.FIELD` (a for_each step's
    output is the list of its elements' outputs, `steps.ID.output[0].FIELD`).

    Example: runner steps template
    """
    from ...steps.registry import default_registry, describe

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
@click.argument(
    "directory", required=False, default=".", type=click.Path(file_okay=False, path_type=Path)
)
@json_option
def init(directory: Path, as_json: bool) -> None:
    """Create a minimal working project: a pipeline, a prompt, a .gitignore entry.

    Example: runner init myproject && cd myproject && runner apply pipeline.yaml
    """
    import shlex

    from .scaffold import FILES, init_project

    had_gitignore = os.path.lexists(directory / ".gitignore")
    created = init_project(directory)
    kept = [rel for rel in FILES if rel not in created]  # there already: never overwritten
    if as_json:
        emit_json({"directory": str(directory), "created": created, "kept": kept, "exit_code": 0})
        return
    for c in created:
        if c == ".gitignore" and had_gitignore:  # lines added to the user's own file
            echo("updated .gitignore: it ignores .runner/ and exports/ now")
        else:
            echo(f"created {c}")
    if kept:
        echo(f"kept {', '.join(kept)}: already there, left as they are (init never overwrites)")
    here = directory.resolve() == Path.cwd().resolve()  # `init .`: no cd to suggest
    cd = "" if here else f"cd {shlex.quote(str(directory))} && "
    echo(f"next: {cd}runner apply pipeline.yaml")


@cli.command()
@pipeline_arg
@param_option
@click.option("--strict", is_flag=True, help="Exit 2 when there is any warning.")
@json_option
def check(file: Path, params: tuple[str, ...], strict: bool, as_json: bool) -> None:
    """Validate a pipeline, check it against runner.toml's providers as `apply` does before it
    runs anything (a setting its provider would not carry, an unknown provider, a size it
    refuses: errors), and lint its rules: unused patterns and named rules, comparisons that can
    never be true for a param's declared type, a `when` reading a conditionally skipped step.

    Example: runner check pipelines/report.yaml --strict
    """
    from ...engine.run.preflight import check_plan
    from ...pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, parse_params(params))
    check_plan(plan, keys=False)  # API keys may live only where the pipeline runs
    decls = plan.doc.data.get("params") or {}
    from ...expr.rules import raw_shell_steps

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
