"""The command line (click), a thin shell over the library."""

from __future__ import annotations


def main() -> None:
    """The `runner` console command: runs one command, then leaves without interpreter
    teardown (see leave.py)."""
    from .entry import main as _main
    from .leave import leave

    try:
        _main()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)
