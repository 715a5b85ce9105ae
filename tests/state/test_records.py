"""Records that agree: run statuses, gc units and run files, runs list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner.errors import UsageError
from runner.state.gc import parse_age
from tests.conftest import REPO, Project


def test_run_statuses_are_one_vocabulary() -> None:
    from runner.engine.run.outcomes import RunStatus
    from runner.surfaces.cli.commands_records import RUN_STATUSES

    assert set(RUN_STATUSES) == {s.value for s in RunStatus}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 12 * 3600), ("45min", 45 * 60), ("90s", 90), ("2w", 1209600)],
)
def test_ages_take_units_that_cannot_be_misread(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["1m", "3mo", "30", "5 years", "d"])
def test_ambiguous_or_unknown_ages_are_refused(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_age(text)
    if text == "1m":
        assert "ambiguous" in err.value.message and "1min" in err.value.message


def test_gc_leaves_no_file_of_a_deleted_run(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns(".runner"))
    shutil.copy(REPO / "runner.toml", tmp_path / "runner.toml")
    first = proj.apply("-p", "n=1", "-p", "seed=1", file="pipelines/thumbnail.yaml")
    second = proj.apply("-p", "n=1", "-p", "seed=2", file="pipelines/thumbnail.yaml")
    old = first["run"]["id"]
    state = tmp_path / ".runner"
    assert (state / "runs" / old).is_dir() and (state / "logs" / "runs" / old).is_dir()
    res = proj.cli("gc", "--keep-last", "1")
    assert res.exit_code == 0, res.stderr
    assert " MB)" in res.stdout and "run folders" in res.stdout
    leftovers = [p for p in state.rglob("*") if old in str(p)]
    assert leftovers == []
    assert (state / "runs" / second["run"]["id"]).is_dir()
    assert proj.cli("verify").exit_code == 0


def test_runs_list_has_headers_and_checks_status(project: Project) -> None:
    assert project.cli("init", ".").exit_code == 0
    project.apply()
    listed = project.cli("runs", "list")
    assert listed.stdout.splitlines()[0].split() == ["RUN", "PIPELINE", "STATUS", "ITEM"]
    bad = project.cli("runs", "list", "--status", "bogus")
    assert bad.exit_code == 2
    for status in ("completed", "partial", "failed", "awaiting_human"):
        assert status in bad.stderr
