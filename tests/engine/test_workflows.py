"""The two shipped reviewed workflows on the fake provider, and one active apply per item."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Project, statuses


@pytest.fixture
def shipped(project: Project) -> Project:
    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(
            REPO / folder, project.root / folder, ignore=shutil.ignore_patterns(".runner", "out")
        )
    return project


def _apply(project: Project, pipeline: str, *args: str) -> dict[str, Any]:
    return project.apply("--state", ".runner", *args, file=f"pipelines/{pipeline}.yaml")


def _decide(project: Project, run_id: str, *args: str) -> None:
    res = project.cli("decide", "--no-resume", run_id, "review", *args, "--state", ".runner")
    assert res.exit_code == 0, res.stderr


def test_report_approved_is_published(shipped: Project) -> None:
    doc = _apply(shipped, "report")
    assert doc["_exit"] == 7, doc
    assert statuses(doc)["draft"] == "ran"
    run_id = doc["run"]["id"]
    out = shipped.root / "out/report/report.md"
    assert not out.exists()
    _decide(shipped, run_id, "revise", "--input", "feedback=mention churn first")
    revised = _apply(shipped, "report")
    assert revised["_exit"] == 7 and statuses(revised)["draft"] == "ran"
    assert statuses(revised)["gather"] == "cached"
    _decide(shipped, run_id, "approve")
    done = _apply(shipped, "report")
    assert done["_exit"] == 0 and done["run"]["id"] == run_id
    text = out.read_text()
    assert "## Summary" in text and "## Findings" in text and "## Next steps" in text


def test_report_rejected_publishes_nothing(shipped: Project) -> None:
    run_id = _apply(shipped, "report")["run"]["id"]
    _decide(shipped, run_id, "reject")
    doc = _apply(shipped, "report")
    assert doc["_exit"] == 8 and doc["run"]["status"] == "rejected"
    assert not (shipped.root / "out").exists()


def _collection(project: Project) -> dict[str, Any]:
    res = project.cli("collections", "show", "documents", "--state", ".runner", "--json")
    assert res.exit_code == 0, res.stderr
    doc: dict[str, Any] = res.json
    return doc


def test_classify_ingest_upserts_without_duplicates(shipped: Project) -> None:
    doc = _apply(shipped, "classify-ingest")
    assert doc["_exit"] == 7, doc
    run_id = doc["run"]["id"]
    rows = shipped.cli("runs", "decisions", run_id, "--state", ".runner", "--json").json
    table = rows["decisions"][0]["summary"]["show"]["labels"]
    assert "examples/classify/landlord-letter.txt" in table
    _decide(shipped, run_id, "approve")
    done = _apply(shipped, "classify-ingest")
    assert done["_exit"] == 0, done
    coll = _collection(shipped)
    assert coll["count"] == 3
    labels = {d["id"]: d["metadata"]["label"] for d in coll["documents"]}
    assert set(labels) == {
        f"examples/classify/{n}"
        for n in ("acme-invoice-1042.txt", "landlord-letter.txt", "uptime-report.txt")
    }
    assert set(labels.values()) <= {"invoice", "letter", "report"}
    hits = shipped.cli(
        "collections", "search", "documents", "boiler", "--state", ".runner", "--json"
    ).json["hits"]
    assert [h["id"] for h in hits] == ["examples/classify/landlord-letter.txt"]
    # nothing changed: converges, no new question
    again = _apply(shipped, "classify-ingest")
    assert again["_exit"] == 0 and _collection(shipped)["count"] == 3
    # an edited document is classified again, asked again, and updates its row
    letter = shipped.root / "examples/classify/landlord-letter.txt"
    letter.write_text(letter.read_text() + "\nP.S. The gas meter reading is due too.\n")
    edited = _apply(shipped, "classify-ingest")
    assert edited["_exit"] == 7
    _decide(shipped, edited["run"]["id"], "approve")
    assert _apply(shipped, "classify-ingest")["_exit"] == 0
    coll = _collection(shipped)
    assert coll["count"] == 3
    [row] = [d for d in coll["documents"] if d["id"].endswith("landlord-letter.txt")]
    assert "gas meter" in row["text"]


def test_classify_ingest_rejected_ingests_nothing(shipped: Project) -> None:
    run_id = _apply(shipped, "classify-ingest")["run"]["id"]
    _decide(shipped, run_id, "reject")
    assert _apply(shipped, "classify-ingest")["_exit"] == 8
    listed = shipped.cli("collections", "list", "--state", ".runner", "--json").json
    assert listed["collections"] == []


SLOW = """\
    runner: 1
    name: slow
    params:
      who: {type: string, default: a}
    item: "${{ params.who }}"
    steps:
      wait:
        uses: shell
        cache: false
        with:
          # held until the test says go (at most 60 s): both applies are seen running at once
          # however slowly the machine starts them
          run: "for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done; echo ${{ params.who }}"
"""


def _spawn(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", *args],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_running(project: Project, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        res = project.cli("runs", "list", "--status", "running", "--state", ".runner", "--json")
        if res.exit_code == 0 and len(res.json["runs"]) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the applies never started")


def test_one_apply_per_item_and_different_items_side_by_side(project: Project) -> None:
    project.write("pipeline.yaml", SLOW)
    first = _spawn(project.root, "-p", "who=a")
    other = _spawn(project.root, "-p", "who=b")
    try:
        _wait_running(project, 2)
        same = project.cli("apply", "pipeline.yaml", "-p", "who=a", "--json")
        assert same.exit_code == 2 and "for item 'a' is running (run " in same.stderr
    finally:
        (project.root / "go").write_text("")
    outs = [json.loads(p.communicate(timeout=90)[0]) for p in (first, other)]
    assert [o["exit_code"] for o in outs] == [0, 0]
    assert {o["run"]["item"] for o in outs} == {"a", "b"}
