"""Image-run commands: pick, iterate, export, show (and the image view of `runs show`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...errors import UsageError
from .base import cli, emit_json, json_option, state_option
from .openstate import open_state
from .termtext import echo, echo_rendered


@cli.command()
@click.argument("run_id")
@click.argument("which")
@state_option
@json_option
def pick(run_id: str, which: str, state_dir: str | None, as_json: bool) -> None:
    """Pick one iteration of a run (by ordinal or iteration id); picking again moves the pick.

    Example: runner pick 20261202-101500-ab12cd 2
    """
    from ...state.iterations import pick as do_pick

    state = open_state(state_dir, readonly=True)
    try:
        it = do_pick(state.journal, run_id, which)
    finally:
        state.close()
    if as_json:
        emit_json(
            {"run_id": it.run_id, "picked": {"id": it.id, "ordinal": it.ordinal}, "exit_code": 0}
        )
    else:
        echo(f"picked #{it.ordinal} ({it.id}) of run {it.run_id}")


@cli.command()
@click.argument("target")
@state_option
@json_option
def show(target: str, state_dir: str | None, as_json: bool) -> None:
    """Show a run with a preview of its images (a grid on colour terminals, a table otherwise).

    Example: runner show 20261202-101500-ab12cd
    """
    from ...review.thumbs.view import render_run, run_json
    from ...state.runfolder import refresh

    state = open_state(state_dir, readonly=True)
    try:
        run = state.journal.get_run(target)
        refresh(state, run["id"])  # a deleted view comes back; an edited one is named
        if as_json:
            emit_json({**run_json(state, run["id"]), "exit_code": 0})
        else:
            echo_rendered(render_run(state, run["id"], with_preview=True, stream=sys.stdout))
    finally:
        state.close()


@cli.command()
@click.argument("target")
@click.option("--n", "n", type=click.IntRange(1, 32), default=4, show_default=True)
@click.option("--prompt-append", default="", help="Text added after a blank line.")
@click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="K=V",
    help="Template variable (nothing is inherited from the parent).",
)
@click.option("--from-picked", is_flag=True, help="Walk up the parent chain to the newest pick.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@state_option
@json_option
def iterate(
    target: str,
    n: int,
    prompt_append: str,
    variables: tuple[str, ...],
    from_picked: bool,
    quiet: bool,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Refine a picked iteration: a child run that uses its raw image as the reference.

    Example: runner iterate RUN --n 4 --prompt-append "warmer colours" --var mood=calm
    """
    from ...errors import InvalidPipeline
    from ...pipeline.loader import read_override
    from ...review.gateview import printable
    from ...review.thumbs.iterate import (
        child_options,
        explain_child,
        explain_lines,
        find_source,
        plan_child,
        run_child,
    )
    from .commands_core import _reporter

    var_map: dict[str, Any] = {}
    for pair in variables:
        if "=" not in pair:
            raise UsageError(f"--var expects K=V, got '{pair}'")
        k, v = pair.split("=", 1)
        try:  # read as -p values are (YAML 1.2, JSON values only, quotes mean YAML)
            var_map[k] = read_override(k, v, "any")
        except InvalidPipeline as exc:
            raise UsageError(f"--var {k}: {exc.message}") from None
    state = open_state(state_dir, readonly=True)
    try:
        parent, it = find_source(state.journal, target, from_picked=from_picked)
        plan = plan_child(parent, it, n=n, prompt_append=prompt_append, variables=var_map)
        info = explain_child(parent, plan)
        if not as_json:
            echo(f"iterating on #{it.ordinal} of run {parent['id']}")
            for line in explain_lines(info):
                echo(printable(line))
        reporter = _reporter(as_json, len(plan.order), None, quiet, plan)
        doc = run_child(state, plan, child_options(parent, it), reporter, as_json=as_json)
    finally:
        state.close()
    if as_json:
        emit_json({**doc, "iterate": info})
    sys.exit(doc["exit_code"])


@cli.command()
@click.argument("target")
@click.option("--to", "dest", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--raw", is_flag=True, help="Copy the raw provider images instead of the finals.")
@click.option("--picked", is_flag=True, help="Only the picked iteration.")
@click.option(
    "--overwrite", is_flag=True, help="Replace files of the same name with other content."
)
@state_option
@json_option
def export(
    target: str,
    dest: Path,
    raw: bool,
    picked: bool,
    overwrite: bool,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Copy (never move) a run's finals (or raws) to a folder as <item>-<ordinal>.<ext>.

    A file of that name holding other bytes (say, an earlier export of another run) is never
    replaced silently: the export stops before writing anything unless --overwrite.

    Example: runner export RUN --to exports/ --picked
    """
    from ...review.thumbs.hooks import export_run
    from ...source.termtext import shown_path

    state = open_state(state_dir, readonly=True)
    try:
        doc = export_run(state, target, dest, raw=raw, picked=picked, overwrite=overwrite)
    finally:
        state.close()
    if as_json:
        emit_json(doc)
    else:
        for f in doc["files"]:
            echo(f"wrote {shown_path(Path(f))}")
        for f in doc["edited_in_run_folder"]:
            echo(
                f"note: {shown_path(Path(f))} was edited by hand; the recorded final was "
                "exported (the store keeps it)",
                err=True,
            )
