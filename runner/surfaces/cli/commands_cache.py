"""`runner cache status|push|pull`: the team's remote cache of step results."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .base import Ctx, cli, emit_json, json_option, param_option, parse_params, state_option
from .termtext import echo

remote_option = click.option(
    "--remote",
    default=None,
    metavar="URL",
    help="The remote cache (any fsspec URL, e.g. s3://bucket/prefix); default: [cache] remote.",
)


@cli.group()
def cache() -> None:
    """The remote cache shared by a team (see [cache] in runner.toml).

    Example: runner cache status --json
    """


def _state(state_dir: str | None, start: Path) -> Path:
    from ...engine.run.locate import state_dir_for

    if state_dir:
        return Path(state_dir).resolve()
    return state_dir_for(start / "pipeline.yaml")


@cache.command("status")
@remote_option
@state_option
@json_option
@click.pass_obj
def cache_status(obj: Ctx, remote: str | None, state_dir: str | None, as_json: bool) -> None:
    """How many of this state's results the remote holds.

    Example: runner cache status --remote s3://team-cache/runner
    """
    from ...engine.run import cache_ops
    from ...state.journal import Journal

    cwd = Path.cwd()
    settings = cache_ops.settings_for(cwd, remote)
    journal = Journal.open(_state(state_dir, cwd), readonly=True)
    try:
        report = cache_ops.status(journal, settings)
    finally:
        journal.close()
    if as_json:
        emit_json({**report.to_json(), "exit_code": 0})
        return
    mode = "writable" if report.writable else "read-only"
    echo(f"remote {report.remote} ({mode}, push: {report.push})")
    echo(f"{report.in_remote} of {report.local_results} local results are in the remote")


@cache.command("push")
@remote_option
@state_option
@json_option
@click.pass_obj
def cache_push(obj: Ctx, remote: str | None, state_dir: str | None, as_json: bool) -> None:
    """Push every local result the remote lacks (objects first, then the record).

    Example: runner cache push
    """
    from ...engine.run import cache_ops
    from ...state.journal import Journal
    from ...state.objects import ObjectStore

    cwd = Path.cwd()
    settings = cache_ops.settings_for(cwd, remote)
    state = _state(state_dir, cwd)
    journal = Journal.open(state, readonly=True)
    try:
        report = cache_ops.push(journal, ObjectStore(state / "objects"), settings, cwd)
    finally:
        journal.close()
    if as_json:
        emit_json({**report.to_json(), "exit_code": 0})
        return
    echo(
        f"pushed {report.pushed} results ({report.objects_written} objects); "
        f"{report.in_remote} of {report.local_results} now in {report.remote}"
    )
    for line in report.skipped:
        echo(f"  not pushed: {line}")


@cache.command("pull")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@param_option
@remote_option
@state_option
@json_option
@click.pass_obj
def cache_pull(
    obj: Ctx,
    file: Path,
    params: tuple[str, ...],
    remote: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Take every result of FILE's steps the remote holds; run nothing.

    Steps the remote lacks are reported skipped ("not in the remote cache"), and those whose
    record it refused (unsigned, malformed, too large, not a regular file) skipped with why;
    a later `runner apply` runs only those.

    Example: runner cache pull pipelines/thumbnail.yaml -p video_id=abc
    """
    from ...engine.run import cache_ops
    from ...engine.run.apply import State, apply_plan
    from ...engine.run.locate import state_dir_for
    from ...engine.run.options import ApplyOptions
    from ...pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, parse_params(params))
    settings = cache_ops.settings_for(plan.root, remote)
    options = ApplyOptions(remote=settings.remote, remote_only=True, kind="pull")
    state = State.open(Path(state_dir).resolve() if state_dir else state_dir_for(file))
    try:
        report = apply_plan(plan, state, options)
    finally:
        state.close()
    doc = report.to_json()
    s = doc["summary"]
    if as_json:
        emit_json(doc)
    else:
        refused = sum(
            1 for step in doc["steps"] if str(step.get("reason") or "").startswith("refused")
        )
        said = f"; {refused} refused by the remote" if refused else ""
        echo(
            f"pulled {s['cached']} step results; {s['skipped'] - refused} not in the remote"
            f"{said} (run {report.run_id})"
        )
    sys.exit(report.exit_code)
