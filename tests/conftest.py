"""Shared fixtures: a throwaway project directory and a CLI runner that speaks JSON."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

# A `runner apply` the tests start runs in its own process, not in a warm server's child
# (runner/warm): tests/surfaces/test_warm_server.py runs both and compares them.
os.environ["RUNNER_SERVER"] = "0"

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


class Project:
    """A temporary project directory with a pipeline and a CLI bound to it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    def cli(self, *args: str, env: dict[str, str] | None = None) -> Result:
        from runner.surfaces.cli.app import cli

        runner = CliRunner()
        old = Path.cwd()
        os.chdir(self.root)
        try:
            res = runner.invoke(cli, list(args), env=env, catch_exceptions=False)
        finally:
            os.chdir(old)
        return Result(res.exit_code, res.stdout, res.stderr)

    def apply(self, *args: str, file: str = "pipeline.yaml") -> Any:
        res = self.cli("apply", file, "--json", *args)
        assert res.stdout, res.stderr
        doc = res.json
        doc["_exit"] = res.exit_code
        doc["_stderr"] = res.stderr
        return doc


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def statuses(doc: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["status"] for s in doc["steps"]}


def ran(doc: dict[str, Any]) -> set[str]:
    return {s["id"] for s in doc["steps"] if s["status"] == "ran"}


def runner_bin() -> list[str]:
    """The command line that starts runner in a subprocess."""
    return [sys.executable, "-m", "runner"]


# -- the browser tests' server and Chromium (tests/webdriving.py) ------------------------------


@pytest.fixture(scope="module")
def served(site: Any) -> Iterator[Any]:
    """`runner serve` for the module's ``site`` (its state dir), on a free loopback port."""
    from .webdriving import Served

    with Served(site.state, site.project.root) as s:
        yield s


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, served: Any) -> Iterator[Any]:
    """Headless Chromium that opened `runner serve`'s login URL, as a user does once."""
    pytest.importorskip("selenium.webdriver")
    from runner.surfaces.web.security import login_url

    from .webdriving import HAVE_BROWSER, TOKEN, chromium

    if not HAVE_BROWSER:
        pytest.skip("needs /usr/bin/chromium and /usr/bin/chromedriver")
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        driver.get(login_url(f"{served.url}/", TOKEN))
        yield driver
    finally:
        driver.quit()
