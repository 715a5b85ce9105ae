"""Where each step ran after a dask run: journaled with its execution (executions.worker), shown
by `runner graph` (text and --json) and by the web page (the run's steps, a step's elements,
the run's graph). Real processes: a LocalCluster of 2 workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runner.surfaces.testing.daskcluster import runner_tracebacks
from runner.surfaces.web.app import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytest.importorskip("distributed")

TOKEN = "where-token-1"
PIPELINE = (
    "runner: 1\nname: where\nsteps:\n"
    "  each:\n    uses: shell\n    for_each: [1, 2, 3, 4, 5, 6]\n"
    "    with:\n"
    '      run: "echo ${{ item }} > out/e${{ item }}.txt"\n'
    '      outputs: ["out/e${{ item }}.txt"]\n'
    "  sum:\n    uses: hash\n    needs: [each]\n    with: {value: done}\n"
)


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["NO_COLOR"] = "1"
    res = subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert runner_tracebacks(res.stderr) == [], res.stderr
    return res


@pytest.fixture(scope="module")
def dask_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Counter[str]]]:
    """A project applied on a 2-worker LocalCluster: (root, run id, step -> workers per the
    StepPassed events)."""
    root = tmp_path_factory.mktemp("where")
    (root / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    res = _runner(
        root,
        *("apply", "pipeline.yaml", "--json", "-q", "--state", ".runner"),
        *("--executor", "dask", "--workers", "2", "--events", "events.jsonl"),
    )
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["run"]["id"]
    seen: dict[str, Counter[str]] = {}
    for line in (root / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == "StepPassed":
            seen.setdefault(ev["step"], Counter())[ev["worker"]] += 1
    assert sum(seen["each"].values()) == 6 and sum(seen["sum"].values()) == 1
    assert all(w.startswith("tcp://127.0.0.1:") for c in seen.values() for w in c)
    return root, run_id, seen


def test_graph_text_names_each_steps_workers(dask_run: Any) -> None:
    root, _run_id, seen = dask_run
    res = _runner(root, "graph", "pipeline.yaml", "--state", ".runner")
    assert res.returncode == 0, res.stderr
    lines = {line.split()[0]: line for line in res.stdout.splitlines() if line.startswith("  ")}
    for step, workers in seen.items():
        for address, n in workers.items():
            assert f"{address} ({n})" in lines[step]


def test_graph_json_names_each_steps_workers(dask_run: Any) -> None:
    root, run_id, seen = dask_run
    res = _runner(root, "graph", "pipeline.yaml", "--state", ".runner", "--json")
    doc = json.loads(res.stdout)
    assert doc["run"] == run_id
    assert {s: dict(c) for s, c in seen.items()} == doc["workers"]
    # the same for --format dot: the label carries the addresses
    dot = _runner(root, "graph", "pipeline.yaml", "--state", ".runner", "--format", "dot")
    assert all(address in dot.stdout for address in seen["each"])


def test_a_local_run_names_no_worker(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    assert _runner(tmp_path, "apply", "pipeline.yaml", "-q", "--state", ".runner").returncode == 0
    doc = json.loads(
        _runner(tmp_path, "graph", "pipeline.yaml", "--state", ".runner", "--json").stdout
    )
    assert doc["workers"] == {}
    text = _runner(tmp_path, "graph", "pipeline.yaml", "--state", ".runner").stdout
    assert "tcp://" not in text and "[on " not in text


def test_the_web_page_shows_where_steps_ran(dask_run: Any) -> None:
    root, run_id, seen = dask_run
    app = create_app(root / ".runner", TOKEN, extra_hosts=["testserver"], cwd=root)
    with TestClient(app) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        for address in seen["each"]:
            assert address in page.text
        doc = client.get(f"/api/runs/{run_id}").json()
        steps = {s["id"]: s for g in doc["phases"] for s in g["steps"]}
        assert steps["each"]["workers"] == dict(seen["each"])
        elements = client.get(f"/api/runs/{run_id}/steps/each/elements").json()["elements"]
        assert Counter(e["worker"] for e in elements) == seen["each"]
        graph = client.get(f"/api/runs/{run_id}/graph").json()["graph"]
        nodes = {s["id"]: s for p in graph["phases"] for s in p["steps"]}
        assert nodes["sum"]["workers"] == dict(seen["sum"])
