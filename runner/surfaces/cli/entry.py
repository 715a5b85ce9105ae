"""The `runner` console command's main: masks secrets, then runs one command of the group.

The group imports only the command module the command line names (base.LazyGroup); importing
app.py instead registers every command.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .base import cli


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
