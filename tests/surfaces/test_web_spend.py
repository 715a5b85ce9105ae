"""The run page's Spent line: the run's JSON carries what its calls really cost, and the page
holds the line and the script that fills it from there (static/spend.js)."""

from __future__ import annotations

import warnings
from pathlib import Path

from runner.surfaces.web.app import create_app
from tests.conftest import Project
from tests.webdriving import TOKEN

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

PIPELINE = """\
runner: 1
name: pictures
steps:
  draw:
    uses: image
    with: {prompt: "a fox", n: 3, size: 32x32, seed: 1}
  note:
    uses: shell
    with: {run: "echo hi"}
"""


def test_the_run_page_says_what_its_calls_cost(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.write("pipeline.yaml", PIPELINE)
    project.write("runner.toml", '[prices]\ncurrency = "EUR"\n[prices.fake]\nimage = 0.25\n')
    run = project.cli("apply", "pipeline.yaml", "--json", "-q")
    assert run.exit_code == 0, run.stderr
    run_id = run.json["run"]["id"]
    app = create_app(tmp_path / ".runner", TOKEN, extra_hosts=["testserver"], cwd=tmp_path)
    with TestClient(app) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        doc = client.get(f"/api/runs/{run_id}").json()
        page = client.get(f"/runs/{run_id}").text
        script = client.get("/static/spend.js")
    spend = doc["spend"]
    assert spend["currency"] == "EUR" and spend["calls"] == 3 and spend["images"] == 3
    assert spend["cost"] == 0.75 and spend["unpriced_calls"] == 0 and spend["estimate"] == 0.75
    assert 'id="run-spend"' in page and "/static/spend.js" in page
    assert script.status_code == 200 and "spend.unpriced_calls" in script.text
