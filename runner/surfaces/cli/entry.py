"""The `runner` console command's main: masks secrets, then runs one command of the group.

A plain `runner apply` command line is run before click loads (quickapply.py); otherwise the group
imports only the command module the command line names (base.LazyGroup); importing app.py
instead registers every command.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path


def main() -> None:
    # Start-up makes ~100k objects that live as long as the process (modules, classes, click's
    # commands, an apply's plan): collecting while they are made finds next to no garbage and
    # cost a fresh one-step apply ~7% of its CPU. The group turns the collector back on before
    # a command runs; apply keeps it off until its run starts, then freezes them (never scanned
    # again).
    gc.disable()
    from ...source import secretmask

    # The secrets of the project here (and credential-looking variables) are masked in all
    # runner prints, and wiped from /proc/PID/environ; an apply learns its pipeline's too.
    try:
        here: Path | None = Path.cwd()
    except OSError:  # a deleted directory: the command says so (failures.cwd_exists)
        here = None
    secretmask.learn_project(here)
    secretmask.mask_streams()
    try:
        if here is not None:
            from .quickapply import answer

            code = answer(sys.argv[1:])
            if code is not None:
                sys.exit(code)
        from .base import Ctx, cli

        cli.main(prog_name="runner", standalone_mode=True, obj=Ctx(console=True))
    except KeyboardInterrupt:
        from .termtext import echo

        echo("cancelled", err=True)
        sys.exit(130)
