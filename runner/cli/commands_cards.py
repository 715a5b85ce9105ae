"""Prompt-version commands: `runner prompts lock|check`."""

from __future__ import annotations

from pathlib import Path

import click

from .app import cli, emit_json, json_option


@cli.group()
def prompts() -> None:
    """Published prompt versions (prompts/<family>/<version>/) and their lock file.

    Example: runner prompts lock
    """


@prompts.command("lock")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Project root holding prompts/.")
@json_option
def prompts_lock(root: Path, as_json: bool) -> None:
    """Record every versioned prompt directory's content hash in prompts.lock.

    Example: runner prompts lock --root .
    """
    from ..prompt_lock import write_lock

    path, versions = write_lock(root.resolve())
    if as_json:
        emit_json({"lock": str(path), "versions": sorted(versions), "exit_code": 0})
    else:
        click.echo(f"locked {len(versions)} prompt versions in {path}")


@prompts.command("check")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True)
@json_option
def prompts_check(root: Path, as_json: bool) -> None:
    """Fail (exit 2) when a locked prompt version's content changed.

    Example: runner prompts check
    """
    from ..prompt_lock import enforce

    enforce(root.resolve())
    if as_json:
        emit_json({"ok": True, "exit_code": 0})
    else:
        click.echo("prompt versions match prompts.lock")
