"""The `runner` command: each command parses, calls one library function, renders the result.

The group and what commands share are in base.py; each command module registers its commands
on import: all of them here, or only the one a command line names (base.LazyGroup, entry.py).
"""

from __future__ import annotations

from .base import cli as cli
from .base import load_commands
from .entry import main as main
from .termtext import json_line as json_line

# A library user or a test of `cli` gets every command registered (`cli.commands`); the
# `runner` console command (entry.py) imports only the module of the command it runs.
load_commands()
