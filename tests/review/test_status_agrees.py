"""One status vocabulary: an image run that ends partial or failed by its iterations says so the
same way on the console (the RunFinished line), in the journal (its RunFinished event and the
run row), in `runs show`, `runs list`, `apply --json` and on the web page's API.

The image run's status is decided by its iterations (design/thumbnail.md): here finalize's
compliance profile refuses some or all of them, which the engine's step statuses alone would
call completed or partial.
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from typing import Any

import pytest

from tests.conftest import Project, runner_bin
from tests.webdriving import TOKEN

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

PIPELINE = """\
runner: 1
name: pictures
params:
  profile: {type: string, default: youtube}
phases: [make, finish]
steps:
  generate:
    uses: image
    phase: make
    with: {prompt: "a lighthouse at dusk", n: 4, size: 320x180, seed: 7}
  final:
    uses: finalize
    phase: finish
    on_partial: continue
    with:
      iterations: "${{ steps.generate.output.iterations }}"
      profile: "${{ params.profile }}"
"""

PROFILE = """\
name: strict
width: 1280
height: 720
max_bytes: 2097152
formats: [jpg]
rules:
  - name: bytes
    expr: bytes < {limit}
    expect: "< {limit}"
    fail: ">= {limit}"
"""


def apply(project: Project, *params: str) -> tuple[dict[str, Any], str, int]:
    """(apply --json document, the console's progress lines, exit code) of a real subprocess."""
    args = [a for p in params for a in ("-p", p)]
    cmd = [*runner_bin(), "apply", "pipeline.yaml", "--json", "--state", ".runner", *args]
    res = subprocess.run(cmd, cwd=project.root, capture_output=True, text=True, timeout=180)
    return json.loads(res.stdout), res.stderr, res.returncode


def sizes(doc: dict[str, Any]) -> list[int]:
    out = []
    for it in doc["iterations"]:
        rules = {r["name"]: r for r in it["compliance"]["rules"]}
        out.append(int(rules["bytes"]["measured"]))
    return sorted(out)


def everywhere(project: Project, doc: dict[str, Any], console: str, code: int) -> set[str]:
    """The status each record gives the run (they must be one)."""
    run_id = doc["run"]["id"]
    finished = re.search(rf"run {run_id}: (\w+) in ", console)
    assert finished, console
    show = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json
    listed = project.cli("runs", "list", "--state", ".runner", "--json").json["runs"]
    events = project.cli("runs", "events", run_id, "--state", ".runner").stdout.splitlines()
    ended = [e for e in map(json.loads, events) if e["type"] == "RunFinished"]
    from runner.surfaces.web.app import create_app

    app = create_app(project.root / ".runner", TOKEN, extra_hosts=["testserver"])
    with TestClient(app, headers={"X-Runner-Token": TOKEN}) as client:
        page = client.get(f"/api/runs/{run_id}").json()
        shown = client.get(f"/runs/{run_id}").text
    assert re.search(r'id="run-status" class="status status-(\w+)"', shown)
    on_page = re.search(r'id="run-status" class="status status-(\w+)"', shown)
    assert on_page is not None
    assert code == doc["exit_code"] == show["run"]["exit_code"] == ended[-1]["exit_code"]
    return {
        finished.group(1),
        doc["run"]["status"],
        show["run"]["status"],
        next(r["status"] for r in listed if r["id"] == run_id),
        ended[-1]["status"],
        page["run"]["status"],
        on_page.group(1),
    }


@pytest.fixture
def pictures(project: Project) -> Project:
    project.write("pipeline.yaml", PIPELINE)
    return project


def test_a_run_its_iterations_fail_is_failed_everywhere(pictures: Project) -> None:
    pictures.write("strict.yaml", PROFILE.format(limit=100))  # no JPEG is that small
    doc, console, code = apply(pictures, "profile=strict.yaml")
    assert [it["status"] for it in doc["iterations"]] == ["failed"] * 4
    assert everywhere(pictures, doc, console, code) == {"failed"}
    assert code == 5  # every failure is a compliance failure


def test_a_run_with_some_compliant_iterations_is_partial_everywhere(pictures: Project) -> None:
    first, _console, code = apply(pictures)
    assert code == 0
    measured = sizes(first)
    assert measured[0] < measured[-1]  # four seeds, four sizes
    limit = (measured[1] + measured[2]) // 2  # two pass, two fail
    pictures.write("strict.yaml", PROFILE.format(limit=limit))
    doc, console, code = apply(pictures, "profile=strict.yaml")
    assert sorted(it["status"] for it in doc["iterations"]) == ["completed"] * 2 + ["failed"] * 2
    assert everywhere(pictures, doc, console, code) == {"partial"}
    assert code == 5
