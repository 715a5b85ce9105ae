"""Every command has help with an example, and `--json` where it prints a result."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from runner.cli.app import cli


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, cmd in sorted(group.commands.items()):
        path = (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path)
        else:
            yield path


ALL = list(commands(cli))


def test_the_command_set() -> None:
    names = {" ".join(p) for p in ALL}
    expected = {
        "apply",
        "validate",
        "explain",
        "plan",
        "graph",
        "runs list",
        "runs show",
        "steps",
        "verify",
        "init",
        "check",
        "pick",
        "iterate",
        "export",
        "show",
        "decide",
        "render",
        "watch",
        "serve",
        "providers",
        "edit",
        "prompts lock",
        "gc",
    }
    assert expected <= names, expected - names


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) for p in ALL])
def test_help_has_an_example(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Example:" in res.output, f"runner {' '.join(path)} --help has no example"


# `runs events` prints JSON lines by nature; `serve` is a server, its API speaks JSON.
JSON_BY_NATURE = {("runs", "events"), ("serve",)}


@pytest.mark.parametrize(
    "path",
    [p for p in ALL if p not in JSON_BY_NATURE],
    ids=[" ".join(p) for p in ALL if p not in JSON_BY_NATURE],
)
def test_json_option(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert "--json" in res.output, f"runner {' '.join(path)} has no --json"
