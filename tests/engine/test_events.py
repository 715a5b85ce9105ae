"""`runner runs events`: the journaled stream, in order, consistent with the progress record."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

from tests.conftest import Project

PHASED = """\
    runner: 1
    name: phased
    phases: [one, two, three]
    steps:
      a: {uses: shell, phase: one, with: {run: "echo a"}}
      b: {uses: shell, phase: one, when: "${{ false }}", with: {run: "echo b"}}
      c: {uses: shell, phase: two, needs: [a], with: {run: "exit 3"}}
      d: {uses: shell, phase: three, needs: [c], with: {run: "echo d"}}
      e: {uses: shell, phase: three, needs: [a], with: {run: "echo e"}}
"""


def _events(project: Project, run_id: str, *extra: str) -> list[dict[str, Any]]:
    res = project.cli("runs", "events", run_id, "--state", ".runner", *extra)
    assert res.exit_code == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def _progress_from(events: list[dict[str, Any]], phase_of: dict[str, str]) -> dict[str, Any]:
    final: dict[str, str] = {}
    for ev in events:
        step, kind = ev["step"], ev["type"]
        if step is None or ev["element"] is not None:
            continue
        if kind == "StepPassed" or (kind == "StepSkipped" and ev.get("reason") == "cached"):
            final[step] = "done"
        elif kind == "StepSkipped":
            final[step] = "skipped"
        elif kind == "StepFailed":
            final[step] = "failed"
        elif kind == "GateAwaiting":
            final[step] = "waiting"
    out: dict[str, Any] = {}
    for step, phase in phase_of.items():
        entry = out.setdefault(
            phase, Counter({"total": 0, "done": 0, "skipped": 0, "failed": 0, "waiting": 0})
        )
        entry["total"] += 1
        if step in final:
            entry[final[step]] += 1
    return {k: dict(v) for k, v in out.items()}


def test_stream_order_and_progress_match(project: Project) -> None:
    project.write("pipeline.yaml", PHASED)
    doc = project.apply()
    assert doc["_exit"] == 6
    run_id = doc["run"]["id"]
    events = _events(project, run_id)
    types = [e["type"] for e in events]
    assert types[0] == "RunStarted" and types[-1] == "RunFinished"
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert types.index("PhaseEntered") < types.index("StepStarted")
    assert next(e["phase"] for e in events if e["type"] == "PhaseEntered") == "one"
    run = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json["run"]
    phase_of = {"a": "one", "b": "one", "c": "two", "d": "three", "e": "three"}
    assert run["progress"] == _progress_from(events, phase_of)
    assert run["progress"]["three"] == {
        "total": 2,
        "done": 1,
        "skipped": 1,
        "failed": 0,
        "waiting": 0,
    }
    assert events[-1]["status"] == "partial" and events[-1]["exit_code"] == 6


def test_follow_streams_until_the_run_finishes(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: slowish
        steps:
          a: {uses: shell, with: {run: "sleep 0.6; echo a"}}
          b: {uses: shell, needs: [a], with: {run: "echo b"}}
    """,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "-q"],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        run_id = None
        for _ in range(300):
            res = project.cli("runs", "list", "--state", ".runner", "--json")
            if res.exit_code == 0 and res.json["runs"]:
                run_id = res.json["runs"][0]["id"]
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert run_id is not None
        events = _events(project, run_id, "--follow")
    finally:
        proc.communicate(timeout=30)
    assert events[-1]["type"] == "RunFinished" and events[-1]["status"] == "completed"
    passed = [e["step"] for e in events if e["type"] == "StepPassed"]
    assert passed == ["a", "b"]
