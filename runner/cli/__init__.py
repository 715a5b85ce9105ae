"""The command line (click), a thin shell over the library."""

from __future__ import annotations


def main() -> None:
    from .app import main as _main

    _main()
