"""Outputs cannot drift silently: a hand-edited output is seen by apply, plan, explain and verify,
and the edited bytes are kept in the store (or the step fails, or the edit is kept in place)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, Project


@pytest.fixture
def inited(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    assert proj.cli("init", ".").exit_code == 0
    first = proj.apply()
    assert first["_exit"] == 0
    second = proj.apply()  # converged twice: the no-op fast path now holds a fingerprint
    assert second["summary"]["ran"] == 0
    return proj


def edit(proj: Project) -> bytes:
    path = proj.root / "out/shout.txt"
    edited = path.read_bytes() + b"\nmy own ending\n"
    path.write_bytes(edited)
    return edited


def test_a_hand_edited_output_is_seen_by_all_four_and_kept(inited: Project) -> None:
    recorded = (inited.root / "out/shout.txt").read_bytes()
    edited = edit(inited)
    # plan and explain
    plan = inited.cli("plan", "pipeline.yaml", "--json", "--detailed-exitcode")
    assert plan.exit_code == 10
    shout = next(s for s in plan.json["steps"] if s["id"] == "shout")
    assert (
        shout["action"] == "restore" and "out/shout.txt was edited by hand" in shout["reasons"][0]
    )
    explained = inited.cli("explain", "pipeline.yaml").stdout
    assert re.search(r"^restore +shout: output out/shout.txt was edited by hand", explained, re.M)
    # verify
    verify = inited.cli("verify", "--json")
    assert verify.exit_code == 1 and verify.json["ok"] is False
    assert any("out/shout.txt" in p and "edited by hand" in p for p in verify.json["problems"])
    # apply: not "nothing changed"; the edit is kept in the store and the line says where
    res = inited.cli("apply", "pipeline.yaml")
    assert res.exit_code == 0 and "nothing changed" not in res.stdout
    line = next(x for x in res.stderr.splitlines() if "edited by hand" in x)
    shown = line.split("your version is kept at ")[1].split(" and ")[0]
    assert shown.startswith(".runner/objects/")  # from the project root, not absolute
    kept_at = inited.root / shown
    assert kept_at.read_bytes() == edited
    assert (inited.root / "out/shout.txt").read_bytes() == recorded
    # everything agrees again, and gc keeps the edited bytes (the run's record names them)
    assert inited.cli("verify").exit_code == 0
    assert inited.cli("plan", "pipeline.yaml", "--detailed-exitcode").exit_code == 0
    assert inited.cli("gc").exit_code == 0
    assert kept_at.read_bytes() == edited


POLICY = """\
runner: 1
name: policy
defaults: {on_edit: POLICY}
steps:
  make:
    uses: shell
    with:
      run: "mkdir -p out && echo made > out/made.txt"
      outputs: [out/made.txt]
"""


@pytest.mark.parametrize("policy", ["fail", "keep"])
def test_on_edit_fail_or_keep_leaves_the_edit_alone(project: Project, policy: str) -> None:
    project.write("pipeline.yaml", POLICY.replace("POLICY", policy))
    assert project.apply()["_exit"] == 0
    out = project.root / "out/made.txt"
    out.write_text("mine\n", encoding="utf-8")
    res = project.cli("apply", "pipeline.yaml", "--json")
    assert out.read_text(encoding="utf-8") == "mine\n"
    if policy == "fail":
        assert res.exit_code == 4 and res.json["run"]["status"] == "failed"
        reason = res.json["steps"][0]["reason"]
        assert "out/made.txt was edited by hand" in reason and "on_edit: fail" in reason
    else:
        assert res.exit_code == 0 and res.json["steps"][0]["status"] == "cached"
        assert "left as is (on_edit: keep)" in res.stderr


def test_a_discarded_runner_edit_is_said_on_the_console(tmp_path: Path) -> None:
    (tmp_path / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines/scene-detail.yaml", tmp_path / "pipelines")
    for d in ("cards", "prompts/scene_detail", "examples/scene-detail"):
        shutil.copytree(REPO / d, tmp_path / d)
    proj = Project(tmp_path)
    first = proj.apply(file="pipelines/scene-detail.yaml")
    proj.write("fixed.txt", "A hand-written shot detail.\n")
    res = proj.cli("edit", first["run"]["id"], "detail", "--element", "1", "--from", "fixed.txt")
    assert res.exit_code == 0, res.stderr
    data = tmp_path / "examples/scene-detail/scenes.yaml"
    text = data.read_text(encoding="utf-8")
    needle = "extreme close-up of her hand on the rug"
    data.write_text(text.replace(needle, needle.replace("rug", "wet rug")), encoding="utf-8")
    planned = proj.cli("plan", "pipelines/scene-detail.yaml").stdout
    assert "user edit #1 would be set aside" in planned
    res = proj.cli("apply", "pipelines/scene-detail.yaml")
    line = next(x for x in res.stderr.splitlines() if x.strip().startswith("edit "))
    assert "detail[1]" in line and "user edit #1 set aside" in line and "contract changed" in line


RERUN = """\
runner: 1
name: rerun
params:
  word: {type: string, default: one}
steps:
  make:
    uses: shell
    with:
      run: "mkdir -p out && echo ${{ params.word }} > out/made.txt"
      outputs: [out/made.txt]
"""


def test_an_edited_output_is_kept_before_its_step_runs_again(project: Project) -> None:
    """Issue 28: an input changes, the step re-runs and writes its output again; the hand
    edit is kept in the store first and the console says where, and gc keeps it."""
    project.write("pipeline.yaml", RERUN)
    assert project.apply()["_exit"] == 0
    out = project.root / "out/made.txt"
    out.write_text("my careful edit\n", encoding="utf-8")
    res = project.cli("apply", "pipeline.yaml", "-p", "word=two")
    assert res.exit_code == 0, res.stderr
    assert out.read_text(encoding="utf-8") == "two\n"
    line = next(x for x in res.stderr.splitlines() if "edited by hand" in x)
    assert "make: out/made.txt" in line and "before the step writes it again" in line
    shown = line.split("kept at ")[1].split(" before ")[0]
    assert shown.startswith(".runner/objects/")
    kept_at = project.root / shown
    assert kept_at.read_text(encoding="utf-8") == "my careful edit\n"
    assert project.cli("gc", "--keep-last", "1").exit_code == 0
    assert kept_at.read_text(encoding="utf-8") == "my careful edit\n"
    # runner's own bytes are not "edits": running again with another word keeps nothing
    again = project.cli("apply", "pipeline.yaml", "-p", "word=three")
    assert again.exit_code == 0 and "edited by hand" not in again.stderr


def test_on_edit_fail_refuses_to_write_over_an_edit_when_its_step_runs_again(
    project: Project,
) -> None:
    project.write("pipeline.yaml", RERUN.replace("steps:", "defaults: {on_edit: fail}\nsteps:"))
    assert project.apply()["_exit"] == 0
    out = project.root / "out/made.txt"
    out.write_text("mine\n", encoding="utf-8")
    res = project.cli("apply", "pipeline.yaml", "-p", "word=two", "--json")
    assert res.exit_code == 4, res.stdout
    assert out.read_text(encoding="utf-8") == "mine\n"
    assert "on_edit: fail" in res.json["steps"][0]["reason"]
