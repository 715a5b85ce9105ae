"""`runner runs cancel` from another process: in-flight work killed, completed work kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.conftest import Project


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _pipeline(project: Project, marker: str) -> None:
    # The sleep duration carries the marker, so both the shell and its sleep child show it.
    project.write(
        "pipeline.yaml",
        f"""\
        runner: 1
        name: slow-each
        params:
          n: {{type: array, default: {list(range(20))}}}
        steps:
          each:
            uses: shell
            for_each: "${{{{ params.n }}}}"
            concurrency: 4
            with:
              run: "sleep {marker}; echo done ${{{{ item }}}}"
    """,
    )


def _wait_for_run(project: Project) -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        res = project.cli("runs", "list", "--status", "running", "--state", ".runner", "--json")
        if res.exit_code == 0 and res.json["runs"]:
            run_id: str = res.json["runs"][0]["id"]
            return run_id
        time.sleep(0.05)
    raise AssertionError("the apply never started")


def test_cancel_from_another_process_then_resume(project: Project) -> None:
    marker = "1.0" + str(uuid.uuid4().int)[:8]  # a unique sleep of ~1 s
    _pipeline(project, marker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", "--jobs", "8"],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = _wait_for_run(project)
        time.sleep(1.6)  # the first batch of four has finished, the second is in flight
        t0 = time.monotonic()
        res = project.cli("runs", "cancel", run_id, "--state", ".runner", "--json")
        out, err = proc.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert res.exit_code == 0, res.stderr
    assert res.json["status"] == "cancelled"
    assert elapsed < 2.0, elapsed
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["run"]["status"] == "cancelled" and doc["exit_code"] == 130
    time.sleep(0.1)
    assert _processes_with(marker) == []
    execs = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json["executions"]
    completed = {e["element"] for e in execs if e["status"] == "completed"}
    assert 4 <= len(completed) < 20
    assert {e["status"] for e in execs} <= {"completed", "cancelled"}
    # the next apply resumes: completed elements are cached, only the rest run (4 at once, as
    # the first did: the default --jobs, the number of cores, may be 2)
    again = project.apply("--jobs", "8")
    assert again["_exit"] == 0
    counts = again["steps"][0]["elements"]
    assert counts.get("cached") == len(completed) and counts.get("ran") == 20 - len(completed)


def test_cancel_a_finished_or_unknown_run(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: quick
        steps:
          one: {uses: shell, with: {run: "echo hi"}}
    """,
    )
    run_id = project.apply()["run"]["id"]
    done = project.cli("runs", "cancel", run_id, "--state", ".runner")
    assert done.exit_code == 2 and "not running" in done.stderr
    assert project.cli("runs", "cancel", "nope-nope", "--state", ".runner").exit_code == 3


def test_cancel_a_suspended_run(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: gated
        steps:
          gate: {uses: human_gate, with: {summary: "ok?"}}
    """,
    )
    run_id = project.apply()["run"]["id"]
    res = project.cli("runs", "cancel", run_id, "--state", ".runner", "--json")
    assert res.exit_code == 0 and res.json["status"] == "cancelled"
    late = project.cli("decide", run_id, "gate", "approve", "--state", ".runner")
    assert late.exit_code == 2
    # the next apply starts a new run that asks again
    doc = project.apply()
    assert doc["_exit"] == 7 and doc["run"]["id"] != run_id
