"""The `runner` command: each command parses, calls one library function, renders the result.

The group and what commands share are in base.py; each command module registers its commands
on import, here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .base import cli as cli
from .termtext import json_line as json_line


# Command modules import what they share from base.py (or openstate), never from one another: a
# command module imported first would otherwise meet a half-imported one through _register.
def _register() -> None:
    from . import commands_core, commands_plan, commands_records  # noqa: F401  (commands register on import)

    for optional in (
        "commands_thumb",
        "commands_review",
        "commands_cards",
        "commands_watch",
        "commands_render",
        "commands_providers",
        "commands_serve",
        "commands_cache",
    ):
        try:
            __import__(f"runner.surfaces.cli.{optional}")
        except ModuleNotFoundError as exc:
            if exc.name != f"runner.surfaces.cli.{optional}":
                raise


def main() -> None:
    from ...source import secretmask

    # The secrets of the project here (and credential-looking variables) are masked in all
    # runner prints, and wiped from /proc/PID/environ; an apply learns its pipeline's too.
    try:
        here: Path | None = Path.cwd()
    except OSError:  # a deleted directory: the command says so (_cwd_exists)
        here = None
    secretmask.learn_project(here)
    secretmask.mask_streams()
    try:
        cli.main(prog_name="runner", standalone_mode=True)
    except KeyboardInterrupt:
        from .termtext import echo

        echo("cancelled", err=True)
        sys.exit(130)


_register()
