"""One project, one state: found by walking up to runner.toml or .runner/, from any subdirectory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click
import pytest

from runner.engine.run.locate import project_root, state_dir_for, state_dir_here
from tests.conftest import REPO, Project, Result

PIPE = """\
runner: 1
name: nested
root: ..
steps:
  greet:
    uses: shell
    with:
      run: "mkdir -p out && echo hi > out/greet.txt"
      outputs: [out/greet.txt]
"""


def cli_in(project: Project, sub: str, *args: str) -> Result:
    """Run the CLI with ``sub`` (relative to the project root) as the working directory."""
    saved = project.root
    project.root = project.root / sub
    try:
        return project.cli(*args)
    finally:
        project.root = saved


@pytest.fixture
def nested(project: Project) -> Project:
    project.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    project.write("pipelines/nested.yaml", PIPE)
    for sub in ("prompts/deep/er", "examples", "out"):
        (project.root / sub).mkdir(parents=True, exist_ok=True)
    return project


def test_root_is_nearest_marker(tmp_path: Path) -> None:
    (tmp_path / "a/b/c").mkdir(parents=True)
    assert project_root(tmp_path / "a/b/c") in (None, *tmp_path.parents)
    (tmp_path / "a/.runner").mkdir()
    assert project_root(tmp_path / "a/b/c") == tmp_path / "a"
    (tmp_path / "runner.toml").write_text("")
    # runner.toml wins over a bare .runner/ below it (an earlier version's per-pipeline state)
    assert project_root(tmp_path / "a/b/c") == tmp_path
    (tmp_path / "a/b/runner.toml").write_text("")
    assert project_root(tmp_path / "a/b/c") == tmp_path / "a/b"


def test_state_at_project_root_for_a_pipeline_in_a_subfolder(nested: Project) -> None:
    doc = nested.apply(file="pipelines/nested.yaml")
    assert doc["run"]["status"] == "completed"
    assert (nested.root / ".runner/journal.db").is_file()
    assert not (nested.root / "pipelines/.runner").exists()
    # the same state, whatever directory the pipeline is applied from
    again = cli_in(nested, "pipelines", "apply", "nested.yaml", "--json")
    assert again.json["summary"]["ran"] == 0
    assert not (nested.root / "pipelines/.runner").exists()


@pytest.mark.parametrize("sub", [".", "pipelines", "prompts/deep/er", "examples", "out"])
def test_state_found_from_every_subdirectory(nested: Project, sub: str) -> None:
    run_id = nested.apply(file="pipelines/nested.yaml")["run"]["id"]
    listed = cli_in(nested, sub, "runs", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [r["id"] for r in listed.json["runs"]] == [run_id]
    shown = cli_in(nested, sub, "runs", "show", run_id, "--json")
    assert shown.exit_code == 0 and shown.json["run"]["id"] == run_id
    assert cli_in(nested, sub, "verify", "--json").json["ok"] is True


def test_pick_hint_works_from_a_subdirectory(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns(".runner"))
    shutil.copy(REPO / "runner.toml", tmp_path / "runner.toml")
    res = cli_in(proj, "pipelines", "apply", "thumbnail.yaml", "-p", "n=1", "-q")
    assert res.exit_code == 0, res.stderr
    hint = next(line for line in res.stdout.splitlines() if "runner pick" in line)
    args = [*hint.split("runner ", 1)[1].split()[:2], "1"]  # runner pick RUN <ordinal>
    for sub in ("pipelines", "prompts", "."):
        picked = cli_in(proj, sub, *args)
        assert picked.exit_code == 0, (sub, picked.stderr)
    assert not (tmp_path / "pipelines/.runner").exists()


def test_old_state_beside_a_pipeline_is_moved_with_one_line(nested: Project) -> None:
    old = nested.apply("--state", "pipelines/.runner", file="pipelines/nested.yaml")
    assert (nested.root / "pipelines/.runner/journal.db").is_file()
    res = nested.cli("apply", "pipelines/nested.yaml", "--json")
    moved = [line for line in res.stderr.splitlines() if "moved the state" in line]
    assert len(moved) == 1 and "pipelines/.runner" in moved[0]
    assert res.json["summary"]["ran"] == 0  # the old journal's cache is kept
    assert not (nested.root / "pipelines/.runner").exists()
    listed = cli_in(nested, "examples", "runs", "list", "--json").json["runs"]
    assert old["run"]["id"] in [r["id"] for r in listed]


def test_old_state_is_left_alone_when_the_root_has_one(nested: Project) -> None:
    nested.apply("--state", "pipelines/.runner", file="pipelines/nested.yaml")
    nested.apply("--state", ".runner", file="pipelines/nested.yaml")
    res = nested.cli("apply", "pipelines/nested.yaml", "--json")
    said = [line for line in res.stderr.splitlines() if "old state" in line]
    assert len(said) == 1 and "ignoring" in said[0]
    assert (nested.root / "pipelines/.runner/journal.db").is_file()


def test_old_layout_without_marker_is_found_from_the_root(tmp_path: Path) -> None:
    (tmp_path / "pipelines/.runner").mkdir(parents=True)
    (tmp_path / "pipelines/.runner/journal.db").write_bytes(b"")
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        assert state_dir_here(None) == (tmp_path / "pipelines/.runner").resolve()
    finally:
        os.chdir(old)


def test_override_and_environment(nested: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = nested.root / "pipelines/nested.yaml"
    assert state_dir_for(pipe) == (nested.root / ".runner").resolve()
    assert state_dir_for(pipe, nested.root / "x") == (nested.root / "x").resolve()
    monkeypatch.setenv("RUNNER_STATE", str(nested.root / "y"))
    assert state_dir_for(pipe) == (nested.root / "y").resolve()
    assert state_dir_here() == (nested.root / "y").resolve()


def test_init_writes_the_marker(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    assert proj.cli("init", "demo").exit_code == 0
    assert (tmp_path / "demo/runner.toml").is_file()
    (tmp_path / "demo/sub").mkdir()
    res = cli_in(proj, "demo/sub", "apply", "../pipeline.yaml", "--json")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "demo/.runner/journal.db").is_file()
    assert cli_in(proj, "demo/sub", "runs", "list", "--json").json["runs"]


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _commands(cmd, f"{prefix}{name} ")
        else:
            out.append((prefix + name, cmd))
    return out


def test_every_state_option_documents_the_lookup_and_env() -> None:
    from runner.surfaces.cli.app import cli

    with_state = 0
    for name, cmd in _commands(cli):
        for opt in cmd.params:
            if isinstance(opt, click.Option) and "--state" in opt.opts and name != "render":
                with_state += 1
                assert opt.envvar == "RUNNER_STATE", name
                assert "RUNNER_STATE" in (opt.help or "") and "runner.toml" in (opt.help or ""), (
                    name
                )
    assert with_state >= 15


def test_apply_in_a_bare_folder_says_it_made_a_state_and_where(project: Project) -> None:
    project.write("pipelines/p.yaml", PIPE)
    assert project_root(project.root) is None
    first = cli_in(project, "pipelines", "apply", "p.yaml", "--json")
    assert first.exit_code == 0, first.stderr
    assert (
        "runner: no runner.toml or .runner/ here or above: created a new state in .runner/ "
        "(`runner init` marks a project root; --state DIR or $RUNNER_STATE puts the state "
        "elsewhere)"
    ) in first.stderr.splitlines()
    assert (project.root / "pipelines/.runner/journal.db").is_file()
    # from the folder above, the state is named from there; a second apply says nothing
    (project.root / "other").mkdir()
    project.write("other/p.yaml", PIPE)
    other = project.cli("apply", "other/p.yaml", "-q")
    assert "no runner.toml or .runner/ in other or above: created a new state in other/.runner/" in other.stderr
    again = cli_in(project, "pipelines", "apply", "p.yaml", "-q")
    assert again.exit_code == 0 and "new state" not in again.stderr


def test_apply_in_a_project_or_with_state_says_nothing_of_a_new_state(
    project: Project, tmp_path: Path
) -> None:
    project.write("p.yaml", PIPE)
    named = project.cli("apply", "p.yaml", "-q", "--state", str(tmp_path / "elsewhere"))
    assert named.exit_code == 0 and "new state" not in named.stderr
    project.write("runner.toml", "")
    marked = project.cli("apply", "p.yaml", "-q")
    assert marked.exit_code == 0 and "new state" not in marked.stderr
