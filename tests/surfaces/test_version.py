"""`runner --version` and the distribution's name and version, without building anything (the
wheel itself is checked by tests/package, a tier of its own)."""

from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner

import runner
from runner.surfaces.cli.app import cli
from tests.conftest import REPO


def test_version_is_the_packages_own_whatever_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def no_metadata(name: str) -> str:  # a source tree on sys.path has no dist-info
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output == f"runner, version {runner.__version__}\n"


def test_the_distribution_is_named_for_the_registry_and_versioned_by_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["name"] == "runner-pipelines"  # `runner` on PyPI is another project
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "runner.__version__"}
    assert project["project"]["scripts"] == {"runner": "runner.surfaces.cli:main"}
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## Unreleased" in changelog
