"""The frictions a new user met in the first hour (issue 30), each shown gone through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Project

NO_PROJECT_COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "x"),
    ("show", "x"),
    ("verify",),
    ("gc",),
    ("collections", "list"),
    ("serve",),
]


@pytest.mark.parametrize("args", NO_PROJECT_COMMANDS, ids=" ".join)
def test_no_project_says_what_was_looked_for_and_names_state(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    res = Project(tmp_path).cli(*args)
    assert res.exit_code == 2, res.stderr
    assert f"no runner.toml or .runner/ found in {tmp_path.resolve()}" in res.stderr
    assert "--state" in res.stderr
    assert "no journal at" not in res.stderr
    assert not (tmp_path / ".runner").exists()  # nothing was made where nothing belongs


def test_a_project_that_never_ran_says_so(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    res = proj.cli("runs", "list")
    assert "nothing has run here yet" in res.stderr, res.stderr
