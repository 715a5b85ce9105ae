"""The scene-detail pipeline end to end on the fake provider."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import REPO, Project


@pytest.fixture
def scenes(tmp_path: Path) -> Project:
    (tmp_path / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines" / "scene-detail.yaml", tmp_path / "pipelines")
    for d in ("cards", "prompts/scene_detail", "examples/scene-detail"):
        shutil.copytree(REPO / d, tmp_path / d)
    return Project(tmp_path)


def run(p: Project) -> dict:
    res = p.cli("apply", "pipelines/scene-detail.yaml", "--json", "-q", "--state", ".runner")
    doc = res.json
    doc["_exit"] = res.exit_code
    return doc


def elements(doc: dict) -> dict[str, dict]:
    return {s["id"]: s.get("elements") or {} for s in doc["steps"]}


def test_runs_end_to_end_and_edits_rerun_one_shot(scenes: Project) -> None:
    first = run(scenes)
    assert first["_exit"] == 0
    assert elements(first)["detail"] == {"total": 6, "ran": 6}
    assert run(scenes)["summary"]["ran"] == 0
    data = scenes.root / "examples/scene-detail/scenes.yaml"
    text = data.read_text(encoding="utf-8")
    old = "extreme close-up of her hand on the rug, primary_subject"
    assert text.count(old) == 1
    data.write_text(text.replace(old, "extreme close-up of her hand on the wet rug, primary_subject"),
                    encoding="utf-8")
    doc = run(scenes)
    els = elements(doc)
    for step in ("card", "user", "detail", "verify"):
        assert els[step] == {"total": 6, "cached": 5, "ran": 1}, (step, els[step])
    statuses = {s["id"]: s["status"] for s in doc["steps"]}
    assert statuses["system"] == "cached"
