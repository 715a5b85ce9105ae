"""The command line (click), a thin shell over the library."""

from __future__ import annotations


def main() -> None:
    """The `runner` console command: runs one command, then leaves without interpreter
    teardown (see leave.py)."""
    import sys

    from ...warm import client

    code = client.run(sys.argv[1:], f"{__name__}:run_here")  # a warm server's child ran it
    if code is not None:
        sys.stdout.flush()
        import os

        os._exit(code)
    run_here()


def run_here() -> None:
    """Run the command line in this process, then leave."""
    from .entry import main as _main
    from .leave import leave

    try:
        _main()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)
