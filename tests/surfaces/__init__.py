"""Tests of the CLI, the web surface, watch, the pytest plugin, the docs (runner.surfaces)."""
