"""Paths runner prints are the ones a person can open from where they stand, never the whole
absolute path: the prompts lock, a kept hand edit (tests/engine/test_drift.py), the page header."""

from __future__ import annotations

import warnings
from pathlib import Path

from tests.conftest import Project

with warnings.catch_warnings():  # as tests/surfaces/test_web_api.py: httpx2 is no dependency
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient


def test_prompts_lock_names_the_lock_from_where_the_user_stands(project: Project) -> None:
    project.write("prompts/hero/1/user.j2", "A hero for {{ title }}.\n")
    project.write("prompts/hero/2/user.j2", "A bolder hero for {{ title }}.\n")
    res = project.cli("prompts", "lock")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() == "locked 2 prompt versions in prompts.lock"
    # from a subfolder, the lock of the --root given, as a path that opens from there
    sub = Project(project.root / "prompts")
    res = sub.cli("prompts", "lock", "--root", "..")
    assert res.stdout.strip() == "locked 2 prompt versions in ../prompts.lock"
    assert str(project.root) not in res.stdout
    # --json keeps the exact path, for programs
    doc = project.cli("prompts", "lock", "--json").json
    assert doc["lock"] == str((project.root / "prompts.lock").resolve())


def test_the_page_header_names_the_state_by_its_project_folder(tmp_path: Path) -> None:
    from runner.surfaces.web.app import create_app

    proj = Project(tmp_path / "myproject")
    proj.root.mkdir()
    assert proj.cli("init", ".").exit_code == 0
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    app = create_app(proj.root / ".runner", "tok", extra_hosts=["testserver"], cwd=proj.root)
    with TestClient(app) as client:
        page = client.get("/", headers={"X-Runner-Token": "tok"})
    assert page.status_code == 200
    assert '<span class="state" title="state directory">myproject/.runner</span>' in page.text
    assert str(tmp_path) not in page.text


def test_no_journal_yet_names_it_from_where_the_user_stands(project: Project) -> None:
    project.write("runner.toml", "")
    res = project.cli("runs", "list")
    assert res.exit_code == 3
    assert "no journal at .runner/journal.db (nothing has run here yet)" in res.stderr
    (project.root / "sub").mkdir()
    below = Project(project.root / "sub").cli("runs", "list")
    assert "no journal at ../.runner/journal.db" in below.stderr
    project.write("pipeline.yaml", "runner: 1\nname: p\nsteps:\n  a: {uses: shell, with: {run: 'true'}}\n")
    graph = project.cli("graph", "pipeline.yaml", "--run", "x")
    assert "no run 'x': there is no journal at .runner" in graph.stderr
