"""The thumbnail workflow's acceptance points (design/thumbnail.md), through the CLI."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.conftest import REPO, Project

VIDEO = "dQw4w9WgXcQ"


@pytest.fixture
def thumbs(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    (tmp_path / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", tmp_path / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", tmp_path / "prompts" / "thumbnail")
    return proj


def apply(p: Project, *args: str) -> dict:
    res = p.cli("apply", "pipelines/thumbnail.yaml", "--json", "-q", "--state", ".runner", *args)
    doc = res.json
    doc["_exit"] = res.exit_code
    return doc


def cli(p: Project, *args: str):
    return p.cli(*args, "--state", ".runner")


def test_hero_run_four_compliant_iterations(thumbs: Project) -> None:
    res = thumbs.cli(
        "apply",
        "pipelines/thumbnail.yaml",
        "-q",
        "--state",
        ".runner",
        "-p",
        f"video_id={VIDEO}",
        "-p",
        "provider=fake",
        "-p",
        "n=4",
        env={"NO_COLOR": "1"},
    )
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "Run " in out and "Pipeline   thumbnail" in out and f"Item       {VIDEO}" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and "completed" in line]
    assert len(rows) == 4 and all("✓ yes" in r for r in rows)
    assert "Pick one with: runner pick " in out
    run_id = out.split("Run ")[1].split()[0].strip()
    doc = cli(thumbs, "runs", "show", run_id, "--json").json
    keys = [it["idempotency_key"] for it in doc["iterations"]]
    assert len(keys) == 4 and len(set(keys)) == 4 and all(len(k) == 32 for k in keys)
    assert [it["seed"] for it in doc["iterations"]] == [0, 1, 2, 3]
    assert doc["run"]["kind"] == "hero" and doc["run"]["parent_run_id"] is None
    assert doc["run"]["reference_asset"] is None and doc["run"]["child_run_ids"] == []
    for it in doc["iterations"]:
        assert it["compliance"]["compliant"] is True
        with Image.open(it["final_path"]) as img:
            assert img.size == (1280, 720) and img.format == "JPEG"


def test_json_apply_and_rerun_is_cached(thumbs: Project) -> None:
    doc = apply(thumbs)
    assert doc["_exit"] == 0 and doc["exit_code"] == 0
    assert doc["run"]["id"] and len(doc["iterations"]) == 4
    again = apply(thumbs)
    assert again["summary"]["ran"] == 0 and len(again["iterations"]) == 4


def test_permanent_failure_in_a_var_fails_all_four(thumbs: Project) -> None:
    doc = apply(thumbs, "-p", "vars={subject: '[[FAIL_PERMANENT]]'}")
    assert doc["_exit"] == 4 and doc["exit_code"] == 4
    assert [it["status"] for it in doc["iterations"]] == ["failed"] * 4
    assert all(
        "FAIL_PERMANENT" in (it["error"] or "") or "permanent" in (it["error"] or "")
        for it in doc["iterations"]
    )


def _generate_seconds(doc: dict) -> float:
    return next(s["duration_s"] for s in doc["steps"] if s["id"] == "generate")


def test_concurrency_timing(thumbs: Project) -> None:
    thumbs.write("runner.toml", "[providers.fake]\ndelay_ms = 500\n")
    fast = apply(thumbs, "-p", "concurrency=4", "-p", "seed=10", "-p", "size=640x360")
    slow = apply(thumbs, "-p", "concurrency=1", "-p", "seed=20", "-p", "size=640x360")
    assert fast["_exit"] == 0 and slow["_exit"] == 0
    assert _generate_seconds(fast) < 1.5
    assert _generate_seconds(slow) > 2.0


def test_pick_show_and_errors(thumbs: Project) -> None:
    doc = apply(thumbs)
    run_id = doc["run"]["id"]
    res = cli(thumbs, "pick", run_id, "2", "--json")
    assert res.json == {
        "run_id": run_id,
        "picked": {"id": f"{run_id}-2", "ordinal": 2},
        "exit_code": 0,
    }
    shown = cli(thumbs, "show", run_id, "--json").json
    assert [it["picked"] for it in shown["iterations"]] == [False, True, False, False]
    cli(thumbs, "pick", run_id, "3")
    shown = cli(thumbs, "runs", "show", run_id, "--json").json
    assert [it["ordinal"] for it in shown["iterations"] if it["picked"]] == [3]
    text = thumbs.cli("show", run_id, "--state", ".runner", env={"NO_COLOR": "1"}).stdout
    assert "#3 ★ ✓" in text and "\x1b[" not in text
    assert cli(thumbs, "pick", run_id, "9").exit_code == 3
    assert cli(thumbs, "pick", "nope-run", "1").exit_code == 3
    assert cli(thumbs, "runs", "show", "nope-run").exit_code == 3


def test_pick_of_failed_iteration_exits_2(thumbs: Project) -> None:
    doc = apply(thumbs, "-p", "vars={subject: '[[FAIL_PERMANENT]]'}", "-p", "n=2")
    res = cli(thumbs, "pick", doc["run"]["id"], "1")
    assert res.exit_code == 2 and "failed" in res.stderr


def test_iterate_child_with_reference_in_corner(thumbs: Project) -> None:
    doc = apply(thumbs)
    run_id = doc["run"]["id"]
    no_pick = cli(thumbs, "iterate", run_id, "--n", "2", "-q")
    assert no_pick.exit_code == 2 and "runner pick" in no_pick.stderr
    cli(thumbs, "pick", run_id, "2")
    res = cli(
        thumbs, "iterate", run_id, "--n", "2", "--prompt-append", "warmer colours", "-q", "--json"
    )
    assert res.exit_code == 0, res.stderr
    child = res.json
    picked_raw = doc["iterations"][1]["assets"]["raw"]
    assert child["run"]["parent_run_id"] == run_id
    assert child["run"]["reference_asset"]["sha256"] == picked_raw
    view = cli(thumbs, "runs", "show", child["run"]["id"], "--json").json
    assert view["run"]["kind"] == "iterate" and len(view["iterations"]) == 2
    assert [it["seed"] for it in view["iterations"]] == [0, 1]
    parent_view = cli(thumbs, "runs", "show", run_id, "--json").json
    assert parent_view["run"]["child_run_ids"] == [child["run"]["id"]]
    # the fake provider pastes the reference, scaled, into the top-left corner
    store = thumbs.root / ".runner" / "objects"
    raw = view["iterations"][0]["assets"]["raw"]
    with (
        Image.open(store / picked_raw[:2] / picked_raw[2:]) as a,
        Image.open(store / raw[:2] / raw[2:]) as b,
    ):
        ref, out = a.convert("RGB"), b.convert("RGB")
    ref_small = ref.resize((ref.width // 4, ref.height // 4))
    for xy in ((2, 2), (ref_small.width // 2, ref_small.height // 2)):
        a, b = out.getpixel(xy), ref_small.getpixel(xy)
        assert all(abs(x - y) <= 40 for x, y in zip(a, b, strict=True)), (xy, a, b)
    text = cli(thumbs, "runs", "show", child["run"]["id"]).stdout
    assert f"Parent run {run_id}" in text and f"Reference  {picked_raw[:12]}" in text


def test_iterate_missing_variable_exits_2_before_any_run(thumbs: Project) -> None:
    thumbs.write("prompts/thumbnail/strict.j2", "Thumbnail of {{ vars.mood }} for {{ title }}\n")
    doc = apply(thumbs, "-p", "template=prompts/thumbnail/strict.j2", "-p", "vars={mood: calm}")
    run_id = doc["run"]["id"]
    cli(thumbs, "pick", run_id, "1")
    before = len(cli(thumbs, "runs", "list", "--json").json["runs"])
    res = cli(thumbs, "iterate", run_id, "--n", "1", "-q")
    assert res.exit_code == 2 and "mood" in res.stderr
    assert len(cli(thumbs, "runs", "list", "--json").json["runs"]) == before
    ok = cli(thumbs, "iterate", run_id, "--n", "1", "-q", "--var", "mood=stormy")
    assert ok.exit_code == 0


def test_export_byte_identical_and_raw(thumbs: Project, tmp_path: Path) -> None:
    doc = apply(thumbs)
    run_id = doc["run"]["id"]
    res = cli(thumbs, "export", run_id, "--to", "out", "--json")
    assert res.exit_code == 0
    names = sorted(Path(f).name for f in res.json["files"])
    assert names == [f"{VIDEO}-{i}.jpg" for i in (1, 2, 3, 4)]
    store = thumbs.root / ".runner" / "objects"
    for it in doc["iterations"]:
        final = it["assets"]["final"]
        exported = thumbs.root / "out" / f"{VIDEO}-{it['ordinal']}.jpg"
        assert exported.read_bytes() == (store / final[:2] / final[2:]).read_bytes()
    raw = cli(thumbs, "export", f"{run_id}-2", "--to", "raws", "--raw", "--json").json
    assert raw["iteration_id"] == f"{run_id}-2" and raw["raw"] is True
    assert [Path(f).name for f in raw["files"]] == [f"{VIDEO}-2.png"]
    assert Image.open(io.BytesIO(Path(raw["files"][0]).read_bytes())).format == "PNG"
    assert cli(thumbs, "export", "unknown-id", "--to", "out").exit_code == 3
    blocker = thumbs.root / "blocked"
    blocker.write_text("a file, not a folder")
    bad = cli(thumbs, "export", run_id, "--to", "blocked/sub")
    assert bad.exit_code == 1 and "blocked/sub" in bad.stderr


def test_export_without_completed_iteration_exits_2(thumbs: Project) -> None:
    doc = apply(thumbs, "-p", "vars={subject: '[[FAIL_PERMANENT]]'}", "-p", "n=1")
    res = cli(thumbs, "export", doc["run"]["id"], "--to", "out")
    assert res.exit_code == 2 and "no completed iteration" in res.stderr


def test_apply_out_copies_compliant_finals(thumbs: Project) -> None:
    doc = apply(thumbs, "--out", "delivered", "-p", "n=2")
    assert sorted(p.name for p in (thumbs.root / "delivered").iterdir()) == [
        f"{VIDEO}-1.jpg",
        f"{VIDEO}-2.jpg",
    ]
    assert len(doc["out"]) == 2


FANNED = """\
runner: 1
name: fanned
params:
  go: {type: boolean, default: true}
steps:
  each:
    uses: image
    for_each: ["a red door", "a blue door"]
    with: {prompt: "${{ item }}", size: "16x16", n: 2}
  maybe:
    uses: image
    when: "${{ params.go == false }}"
    with: {prompt: "never", size: "16x16"}
"""


def test_image_steps_in_a_for_each_or_skipped_by_when_end_the_run_by_their_statuses(
    project: Project,
) -> None:
    """Issue 28: the run was `failed` (exit 4) though every element completed: the iteration
    count found none (each element's iterations are its own) and called that a failure."""
    project.write("runner.toml", '[general]\ndefault_provider = "fake"\n')
    project.write("pipeline.yaml", FANNED)
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    assert doc["run"]["status"] == "completed"
    each = next(s for s in doc["steps"] if s["id"] == "each")
    assert each["status"] == "ran"
    shown = project.cli("runs", "show", doc["run"]["id"], "--json")
    assert shown.json["run"]["status"] == "completed"
    again = project.apply()
    assert again["_exit"] == 0 and again["run"]["status"] == "completed"


SIZED = """\
runner: 1
name: sized
params:
  size: {type: string, default: 96x48}
  negative: {type: string, default: ""}
steps:
  gen:
    uses: image
    with: {prompt: "a lighthouse", size: "${{ params.size }}", negative_prompt: "${{ params.negative }}"}
"""


def _first_iteration(project: Project, doc: dict) -> dict:
    shown = project.cli("runs", "show", doc["run"]["id"], "--json").json
    gen = next(e for e in shown["executions"] if e["step_id"] == "gen")
    first: dict = gen["output"]["iterations"][0]
    return first


def _report(project: Project, doc: dict) -> Any:
    shown = project.cli("runs", "show", doc["run"]["id"], "--json").json
    return next(e for e in shown["executions"] if e["step_id"] == "gen")["report"]


def _image_size(project: Project, doc: dict) -> tuple[int, int]:
    digest = _first_iteration(project, doc)["raw"]
    path = project.root / ".runner" / "objects" / digest[:2] / digest[2:]
    with Image.open(path) as img:
        return img.size


def test_a_changed_size_or_negative_prompt_makes_a_new_image(project: Project) -> None:
    """Issue 28: the call's key left size, negative_prompt and params out, so the ledger
    answered a 32x32 request with the 96x48 image (0 requests sent)."""
    project.write("runner.toml", '[general]\ndefault_provider = "fake"\n')
    project.write("pipeline.yaml", SIZED)
    first = project.apply()
    assert first["_exit"] == 0 and _image_size(project, first) == (96, 48)
    second = project.apply("-p", "size=32x32")
    assert second["_exit"] == 0 and _image_size(project, second) == (32, 32)
    assert _report(project, second) is None  # no call answered by the ledger
    third = project.apply("-p", "size=32x32", "-p", "negative=fog")
    assert third["_exit"] == 0 and _report(project, third) is None


def test_prompt_append_follows_one_blank_line_and_the_shown_prompt_is_the_sent_one(
    thumbs: Project,
) -> None:
    run_id = apply(thumbs)["run"]["id"]
    cli(thumbs, "pick", run_id, "1")
    res = cli(thumbs, "iterate", run_id, "--n", "1", "--prompt-append", "warmer colours", "--json")
    assert res.exit_code == 0, res.stderr
    shown = res.json["iterate"]["prompt"]
    view = cli(thumbs, "runs", "show", res.json["run"]["id"], "--json").json
    (generate,) = [e for e in view["executions"] if e["step_id"] == "generate"]
    # the fake provider answers with the prompt it was sent
    sent = generate["output"]["iterations"][0]["metadata"]["revised_prompt"]
    assert sent.endswith("no watermarks.\n\nwarmer colours"), repr(sent)  # was "\n\n\nwarmer"
    assert sent == shown
