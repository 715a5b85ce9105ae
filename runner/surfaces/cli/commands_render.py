"""`runner render`: print the prompts a pipeline would send, without calling a paid provider."""

from __future__ import annotations

from pathlib import Path

import click

from .base import cli, emit_json, json_option, param_option, parse_params, pipeline_arg
from .termtext import echo, echo_block


@cli.command()
@pipeline_arg
@click.option(
    "--step",
    "steps",
    multiple=True,
    metavar="ID",
    help="Render only this prompt step (repeatable; default: every prompt step); a shell "
    "step named here shows the script it would run and its values, without running it.",
)
@param_option
@click.option(
    "--fixture",
    default=None,
    metavar="NAME",
    help="Use the params and input files of this `tests:` fixture.",
)
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Scratch state directory for the steps the renders need (default: a "
    "temporary one; never the pipeline's .runner/).",
)
@json_option
def render(
    file: Path,
    steps: tuple[str, ...],
    params: tuple[str, ...],
    fixture: str | None,
    state_dir: Path | None,
    as_json: bool,
) -> None:
    """Print every prompt-producing step's render: template text, llm messages, card blocks.

    Steps the prompts need run on the offline `fake` provider in a scratch copy of the
    pipeline's directory; llm steps are not called.

    Example: runner render pipeline.yaml --step hero_prompt --fixture small -p title=hi
    """
    from ...engine.plan.render import render_pipeline

    result = render_pipeline(
        file,
        fixture=fixture,
        overrides=parse_params(params),
        steps=steps or None,
        state_dir=state_dir,
    )
    if as_json:
        emit_json(result.to_json())
        return
    for r in result.renders:
        echo(f"=== {r.step} ({r.kind}) ===")
        echo_block(r.text)
