"""Every command has help with an example, and `--json` where it prints a result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The shell lines of the README's first code block (its two commands)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_installs_the_package_alone_then_tests_install_their_extra() -> None:
    setup, tests = readme_commands()[:2]
    assert "pip install -e . " in setup and "[test]" not in setup, setup
    assert "runner apply pipelines/thumbnail.yaml" in setup
    assert tests == "pip install -e '.[test]' && python -m pytest", tests


def test_ci_runs_the_readmes_test_command() -> None:
    tests = readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests.replace("pip install -e", "pip install -q -e") in ci.splitlines()


def test_no_stray_binaries_at_the_root() -> None:
    assert not list(ROOT.glob("*.whl"))
