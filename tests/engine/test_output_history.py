"""An output's history is not part of its value (issue 44): an llm reply or an image answered by
the call ledger (after `--force`, gc, an image `n:` change) is the value a fresh run gives, so a
step reading the whole output keeps its key. That the ledger answered is told in the
execution's report (`runs show`, the page)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.conftest import Project, ran

WHOLE = """\
runner: 1
name: whole
steps:
  ask:
    uses: llm
    with: {prompt: "Name a colour."}
    check: ["${{ output.text | length > 0 }}"]
  keep:
    uses: template
    with:
      text: "{{ reply | tojson }}"
      vars: {reply: "${{ steps.ask.output }}"}
"""

IMAGES = """\
runner: 1
name: pictures
steps:
  draw:
    uses: image
    with: {{prompt: "a lighthouse", n: {n}, size: 32x32, seed: 3}}
  keep:
    uses: template
    with:
      text: "{{{{ first | tojson }}}}"
      vars: {{first: "${{{{ steps.draw.output.iterations[0] }}}}"}}
"""


def _output(project: Project, run_id: str, step: str) -> Any:
    res = project.cli("runs", "show", run_id, "--json")
    assert res.exit_code == 0, res.stderr
    [row] = [e for e in res.json["executions"] if e["step_id"] == step]
    return row


def test_an_llm_reply_answered_by_the_ledger_is_the_fresh_value(project: Project) -> None:
    project.write("pipeline.yaml", WHOLE)
    first = project.apply()
    assert first["_exit"] == 0 and ran(first) == {"ask", "keep"}
    fresh = _output(project, first["run"]["id"], "ask")
    assert "reused" not in fresh["output"] and fresh["report"] is None
    forced = project.apply("--force", "ask")
    assert forced["_exit"] == 0
    again = _output(project, forced["run"]["id"], "ask")
    assert again["output"] == fresh["output"]  # was: the same plus "reused": true
    # `keep` runs again (--force reaches downstream) on the very value a fresh run gives: the
    # same key (today's main: another key, its input carrying "reused": true)
    keys = {s["id"]: s["key"] for s in first["steps"]}
    assert {s["id"]: s["key"] for s in forced["steps"]} == keys
    # the reuse is told where a person looks: the execution's report
    assert again["report"] == {"reused_calls": [fresh["output"]["idempotency_key"]]}


def test_an_image_answered_by_the_ledger_is_the_fresh_value(project: Project) -> None:
    project.write("pipeline.yaml", IMAGES.format(n=1))
    first = project.apply()
    assert first["_exit"] == 0, first
    project.write("pipeline.yaml", IMAGES.format(n=2))  # iteration 1's call is the same call
    second = project.apply()
    assert second["_exit"] == 0, second
    drawn = _output(project, second["run"]["id"], "draw")
    assert all("reused" not in it for it in drawn["output"]["iterations"])
    assert len(drawn["report"]["reused_calls"]) == 1
    # today's main: iteration 1 said "reused": true, so `keep` ran again on another value
    assert ran(second) == {"draw"}, second


def test_no_reused_flag_is_journaled_in_any_output(project: Project) -> None:
    project.write("pipeline.yaml", WHOLE)
    project.apply()
    project.apply("--force", "ask")
    db = sqlite3.connect(project.root / ".runner/journal.db")
    try:
        outputs = [r[0] for r in db.execute("SELECT output FROM executions") if r[0]]
    finally:
        db.close()
    assert outputs and not any('"reused"' in o for o in outputs)
