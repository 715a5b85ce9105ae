"""Every command has help with an example, and `--json` where it prints a result."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from runner.surfaces.cli.app import cli


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


ROOT = Path(__file__).resolve().parent.parent.parent


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


DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def test_the_references_are_generated_from_the_code() -> None:
    """docs/reference/*.md are what `python -m runner.surfaces.docgen` makes of today's code: a changed
    option, help text or step schema without a regenerated reference fails here."""
    from runner.surfaces.docgen import generated

    for path, text in generated().items():
        assert path.exists(), f"{path} is missing: run python -m runner.surfaces.docgen"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is stale: run python -m runner.surfaces.docgen and commit it"
        )


def test_docgen_check_reports_a_stale_reference(tmp_path: Path, monkeypatch: Any) -> None:
    import runner.surfaces.docgen as docgen

    monkeypatch.setattr(docgen, "DOCS", tmp_path)
    assert docgen.main([]) == 0  # writes both
    assert docgen.main(["--check"]) == 0
    (tmp_path / "cli.md").write_text("old\n")
    assert docgen.main(["--check"]) == 1
    assert (tmp_path / "cli.md").read_text() == "old\n"  # --check writes nothing


def test_the_readme_is_short_and_maps_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 130
    for page in PAGES:
        rel = page.relative_to(ROOT).as_posix()
        if page.name != "README.md":
            assert f"({rel})" in readme or f"({page.relative_to(DOCS).as_posix()})" in (
                DOCS / "README.md"
            ).read_text(), f"{rel} is linked from neither README.md nor docs/README.md"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens.
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_link_resolves(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.relative_to(ROOT)} links to missing {target}"
        if anchor:
            assert anchor in _anchors(dest), f"{page.relative_to(ROOT)}: no #{anchor} in {file}"


def test_every_command_and_step_type_is_explained() -> None:
    """The concept pages (not only the generated reference) name every command and step type."""
    from runner.steps.registry import BUILTINS

    prose = " ".join(p.read_text() for p in PAGES if p.parent.name != "reference")
    for path in ALL:
        name = "runner " + " ".join(path)
        assert name in prose, f"`{name}` is in no docs page"
    steps_page = (DOCS / "steps.md").read_text()
    for step in BUILTINS:
        assert f"`{step}`" in steps_page, f"step type {step} is not in docs/steps.md"
