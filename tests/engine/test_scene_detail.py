"""The scene-detail pipeline end to end on the fake provider."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, Project


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
    data.write_text(
        text.replace(old, "extreme close-up of her hand on the wet rug, primary_subject"),
        encoding="utf-8",
    )
    doc = run(scenes)
    els = elements(doc)
    for step in ("card", "user", "detail", "verify"):
        assert els[step] == {"total": 6, "cached": 5, "ran": 1}, (step, els[step])
    statuses = {s["id"]: s["status"] for s in doc["steps"]}
    assert statuses["system"] == "cached"


def test_locked_prompt_version_refuses_edits_and_new_version_reruns(scenes: Project) -> None:
    shutil.copy(REPO / "prompts.lock", scenes.root / "prompts.lock")
    assert run(scenes)["_exit"] == 0
    user = scenes.root / "prompts/scene_detail/16/user.j2"
    original = user.read_text(encoding="utf-8")
    user.write_text(original + "Be brief.\n", encoding="utf-8")
    res = scenes.cli("apply", "pipelines/scene-detail.yaml", "--state", ".runner", "-q")
    assert res.exit_code == 2
    assert "published prompt version prompts/scene_detail/16 is locked" in res.stderr
    assert "create a new version directory instead" in res.stderr
    # a new version is a new directory: its prompt steps and their downstream re-run
    user.write_text(original, encoding="utf-8")
    shutil.copytree(
        scenes.root / "prompts/scene_detail/16", scenes.root / "prompts/scene_detail/17"
    )
    (scenes.root / "prompts/scene_detail/17/user.j2").write_text(
        original + "Be brief.\n", encoding="utf-8"
    )
    res = scenes.cli(
        "apply",
        "pipelines/scene-detail.yaml",
        "--json",
        "-q",
        "--state",
        ".runner",
        "-p",
        "prompt_version=17",
    )
    els = elements(res.json)
    assert res.exit_code == 0
    assert els["user"] == {"total": 6, "ran": 6} and els["detail"] == {"total": 6, "ran": 6}
    assert els["card"] == {"total": 6, "cached": 6}


def _detail_text(p: Project, run_id: str, element: int) -> str:
    shown = p.cli("runs", "show", run_id, "--state", ".runner", "--json").json
    rows = [e for e in shown["executions"] if e["step_id"] == "detail" and e["element"] == element]
    return str(rows[-1]["output"]["text"])


def test_user_edit_is_reused_while_the_card_holds_then_set_aside(scenes: Project) -> None:
    first = run(scenes)
    run_id = first["run"]["id"]
    scenes.write("fixed.txt", "A hand-written shot detail.\n")
    res = scenes.cli(
        "edit",
        run_id,
        "detail",
        "--element",
        "1",
        "--from",
        "fixed.txt",
        "--state",
        ".runner",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    assert res.json["changed"] is True and res.json["override"]["status"] == "active"
    # nothing changed: the edit is the element's output
    again = run(scenes)
    assert _detail_text(scenes, again["run"]["id"], 1) == "A hand-written shot detail.\n"
    assert _detail_text(scenes, again["run"]["id"], 0) != "A hand-written shot detail.\n"
    # another shot changes: this shot's card holds, the edit is still used
    data = scenes.root / "examples/scene-detail/scenes.yaml"
    text = data.read_text(encoding="utf-8")
    other = "wide shot of the room from the southeast doorway, primary_subject"
    data.write_text(
        text.replace(other, "wide shot of the room from the east doorway, primary_subject"),
        encoding="utf-8",
    )
    doc = run(scenes)
    assert _detail_text(scenes, doc["run"]["id"], 1) == "A hand-written shot detail.\n"
    # this shot's card drifts: the edit is set aside (kept, reported) and the shot regenerates
    text = data.read_text(encoding="utf-8")
    assert text.count("extreme close-up of her hand on the rug") == 2  # shot and staging
    data.write_text(
        text.replace(
            "extreme close-up of her hand on the rug", "extreme close-up of her hand on the wet rug"
        ),
        encoding="utf-8",
    )
    doc = run(scenes)
    assert elements(doc)["detail"] == {"total": 6, "cached": 5, "ran": 1}
    assert _detail_text(scenes, doc["run"]["id"], 1) != "A hand-written shot detail.\n"
    events = scenes.cli("runs", "events", doc["run"]["id"], "--state", ".runner").stdout
    assert '"OverrideSetAside"' in events and "contract changed" in events
    import sqlite3

    db = sqlite3.connect(scenes.root / ".runner/journal.db")
    status, reason = db.execute("SELECT status, reason FROM overrides").fetchone()
    db.close()
    assert status == "set_aside" and "regenerating" in reason
