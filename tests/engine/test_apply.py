"""The interpreter's convergence rules, end to end through the CLI with a real journal."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import Project, ran, statuses

CHAIN = """\
runner: 1
name: chain
steps:
  s1:
    uses: shell
    with: {run: "cat in1.txt > out/1.txt", inputs: [in1.txt], outputs: [out/1.txt]}
  s2:
    uses: shell
    with: {run: "cat out/1.txt in2.txt > out/2.txt", inputs: [out/1.txt, in2.txt], outputs: [out/2.txt]}
    needs: [s1]
  s3:
    uses: shell
    with: {run: "cat out/2.txt in3.txt > out/3.txt", inputs: [out/2.txt, in3.txt], outputs: [out/3.txt]}
    needs: [s2]
  s4:
    uses: shell
    with: {run: "cat out/3.txt > out/4.txt", inputs: [out/3.txt], outputs: [out/4.txt]}
    needs: [s3]
"""


def chain(project: Project) -> None:
    project.write("pipeline.yaml", CHAIN)
    for i in (1, 2, 3):
        project.write(f"in{i}.txt", f"input {i}\n")


def test_second_apply_runs_nothing(project: Project) -> None:
    chain(project)
    first = project.apply()
    assert first["_exit"] == 0 and first["summary"]["ran"] == 4
    second = project.apply()
    assert second["summary"] == {"ran": 0, "cached": 4, "skipped": 0, "failed": 0}
    assert second["exit_code"] == 0


def test_touch_without_change_runs_nothing(project: Project) -> None:
    chain(project)
    project.apply()
    p = project.root / "in2.txt"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns + 5_000_000_000, st.st_mtime_ns + 5_000_000_000))
    assert project.apply()["summary"]["ran"] == 0


def test_edit_input_reruns_exactly_downstream(project: Project) -> None:
    chain(project)
    project.apply()
    project.write("in2.txt", "changed\n")
    doc = project.apply()
    assert ran(doc) == {"s2", "s3", "s4"}
    assert statuses(doc)["s1"] == "cached"
    assert (project.root / "out/4.txt").read_text() == "input 1\nchanged\ninput 3\n"


def test_deleted_output_restored_without_running(project: Project) -> None:
    chain(project)
    project.apply()
    (project.root / "out/2.txt").unlink()
    doc = project.apply()
    assert doc["summary"]["ran"] == 0
    assert (project.root / "out/2.txt").read_text() == "input 1\ninput 2\n"


def test_deleted_object_reruns_that_step(project: Project) -> None:
    chain(project)
    project.apply()
    db = sqlite3.connect(project.root / ".runner/journal.db")
    files = json.loads(
        db.execute(
            "SELECT files FROM executions WHERE step_id='s3' AND status='completed'"
        ).fetchone()[0]
    )
    db.close()
    digest = files["out/3.txt"]
    obj = project.root / ".runner/objects" / digest[:2] / digest[2:]
    obj.chmod(0o644)
    obj.unlink()
    doc = project.apply()
    assert "s3" in ran(doc)
    assert statuses(doc)["s1"] == "cached" and statuses(doc)["s2"] == "cached"


def test_cache_false_always_runs_and_force_reruns_downstream(project: Project) -> None:
    chain(project)
    text = CHAIN.replace("  s4:\n    uses: shell\n", "  s4:\n    uses: shell\n    cache: false\n")
    project.write("pipeline.yaml", text)
    project.apply()
    assert ran(project.apply()) == {"s4"}
    assert ran(project.apply("--force", "s2")) == {"s2", "s3", "s4"}


def test_failed_step_reruns_but_completed_siblings_do_not(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: fan
        steps:
          ok1: {uses: shell, with: {run: "echo a"}}
          ok2: {uses: shell, with: {run: "echo b"}}
          bad: {uses: shell, with: {run: "test -f flag"}}
          after: {uses: shell, with: {run: "echo c"}, needs: [bad]}
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 6
    assert statuses(doc) == {"ok1": "ran", "ok2": "ran", "bad": "failed", "after": "skipped"}
    assert "exited with 1" in next(s for s in doc["steps"] if s["id"] == "bad")["reason"]
    doc = project.apply()
    assert ran(doc) == set() and statuses(doc)["bad"] == "failed"
    project.write("flag", "x")
    doc = project.apply()
    assert ran(doc) == {"bad", "after"} and doc["_exit"] == 0


def test_all_failed_is_exit_4(project: Project) -> None:
    project.write(
        "pipeline.yaml", "runner: 1\nname: x\nsteps:\n  a: {uses: shell, with: {run: 'exit 3'}}\n"
    )
    doc = project.apply()
    assert doc["_exit"] == 4 and doc["run"]["status"] == "failed"


FOR_EACH = """\
runner: 1
name: fe
params:
  items: {type: array, default: []}
steps:
  each:
    uses: shell
    for_each: "${{ params.items }}"
    concurrency: 3
    with:
      run: "mkdir -p PROBE/inflight && touch PROBE/inflight/${{ item }} && ls PROBE/inflight | wc -l >> PROBE/counts.txt && sleep 0.05 && rm PROBE/inflight/${{ item }} && test ${{ item }} != bad"
"""


def test_for_each_partial_fix_insert_and_concurrency(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The elements count how many of them run at once in a directory they share, the test's
    # probe: outside the project, as one element's files are no input of another's (commands
    # may write in the temporary directories)
    probe = tmp_path_factory.mktemp("probe")
    project.write("pipeline.yaml", FOR_EACH.replace("PROBE", str(probe)))
    items = [f"e{i}" for i in range(49)]
    items.insert(20, "bad")
    doc = project.apply("-p", "items=" + json.dumps(items), "--jobs", "8")
    step = doc["steps"][0]
    assert doc["_exit"] == 6 and step["status"] == "partial"
    assert step["elements"] == {"total": 50, "ran": 49, "failed": 1}
    counts = [int(x) for x in (probe / "counts.txt").read_text().split()]
    assert len(counts) == 50 and max(counts) <= 3 and max(counts) >= 2
    # fix the failing element: exactly that one runs
    fixed = [("good" if x == "bad" else x) for x in items]
    doc = project.apply("-p", "items=" + json.dumps(fixed))
    assert doc["steps"][0]["elements"] == {"total": 50, "cached": 49, "ran": 1}
    # insert an element in the middle: exactly one runs
    fixed.insert(10, "new")
    doc = project.apply("-p", "items=" + json.dumps(fixed))
    assert doc["steps"][0]["elements"] == {"total": 51, "cached": 50, "ran": 1}
    assert doc["_exit"] == 0


def test_json_document_shape(project: Project) -> None:
    chain(project)
    doc = project.apply()
    assert set(doc["run"]) >= {"id", "pipeline", "status", "item"}
    assert doc["run"]["pipeline"] == "chain" and doc["run"]["item"] is None
    for s in doc["steps"]:
        assert set(s) >= {"id", "status", "key", "duration_s"}
        assert len(s["key"]) == 64


def test_explain_says_why(project: Project) -> None:
    chain(project)
    res = project.cli("explain", "pipeline.yaml", "--json")
    assert next(s["reasons"] for s in res.json["steps"]) == ["never ran"]
    project.apply()
    project.write("in3.txt", "edited\n")
    rows = {s["id"]: s for s in project.cli("explain", "pipeline.yaml", "--json").json["steps"]}
    assert rows["s1"]["action"] == "cached"
    assert rows["s3"]["action"] == "run"
    assert [r.split(" (")[0] for r in rows["s3"]["reasons"]] == ["input in3.txt changed"]
    assert rows["s4"]["action"] == "unknown"
    assert rows["s4"]["reasons"] == ["depends on 's3', which would run first"]


def test_verify_clean_then_detects_corruption(project: Project) -> None:
    chain(project)
    project.apply()
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True
    objs = [p for p in (project.root / ".runner/objects").rglob("*") if p.is_file()]
    objs[0].chmod(0o644)
    objs[0].write_bytes(b"tampered")
    res = project.cli("verify", "--state", ".runner", "--json")
    assert res.exit_code == 1 and "corrupt" in res.json["problems"][0]


def test_concurrent_apply_of_same_item_is_refused(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: slow
        steps:
          wait: {uses: shell, with: {run: "sleep 2"}, cache: false}
    """,
    )
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json"],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 20
    while time.time() < deadline:  # wait until the first apply holds the item (machines are slow)
        db_path = project.root / ".runner/journal.db"
        if db_path.exists():
            db = sqlite3.connect(db_path)
            try:
                busy = db.execute("SELECT COUNT(*) FROM runs WHERE status='running'").fetchone()[0]
            except sqlite3.OperationalError:
                busy = 0
            db.close()
            if busy:
                break
        time.sleep(0.05)
    second = project.cli("apply", "pipeline.yaml", "--json")
    out, _err = proc.communicate(timeout=30)
    assert json.loads(out)["exit_code"] == 0
    assert second.exit_code == 2
    assert "another apply of pipeline 'slow' is running (run " in second.stderr


def test_dry_run_runs_nothing(project: Project) -> None:
    chain(project)
    project.apply("--dry-run")
    assert not (project.root / "out").exists()


def test_init_project_applies(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    res = proj.cli("init", "demo")
    assert res.exit_code == 0
    sub = Project(tmp_path / "demo")
    doc = sub.apply()
    assert doc["_exit"] == 0 and doc["summary"]["ran"] == 3  # template, llm, shell
    ignored = (tmp_path / "demo/.gitignore").read_text().splitlines()
    assert ".runner/" in ignored and "exports/" in ignored  # the web page exports there


def test_when_false_skips_and_when_error_fails(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: w
        params:
          go: {type: boolean, default: false}
          data: {type: object, default: {}}
        steps:
          maybe: {uses: shell, with: {run: "echo hi"}, when: "${{ params.go }}"}
          after: {uses: shell, with: {run: "echo after"}, needs: [maybe]}
          opt_in: {uses: shell, with: {run: "echo anyway"}, needs: [maybe], on_skipped: run}
          broken: {uses: shell, with: {run: "echo x"}, when: "${{ params.data.missing.deeper }}"}
    """,
    )
    doc = project.apply()
    assert statuses(doc) == {
        "maybe": "skipped",
        "after": "skipped",
        "opt_in": "ran",
        "broken": "failed",
    }
    reason = next(s["reason"] for s in doc["steps"] if s["id"] == "broken")
    assert reason.startswith("when: ") and "missing" in reason
    doc = project.apply("-p", "go=true")
    assert statuses(doc)["maybe"] == "ran" and statuses(doc)["after"] == "ran"


def test_reading_another_steps_output_orders_the_steps(project: Project) -> None:
    # `late` is listed first and names no `needs`: its input is `early`'s declared output.
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: files
        steps:
          late:
            uses: shell
            with: {run: "cat mid.txt > final.txt", inputs: [mid.txt], outputs: [final.txt]}
          early:
            uses: shell
            with: {run: "sleep 0.2 && echo made > mid.txt", outputs: [mid.txt]}
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    assert (project.root / "final.txt").read_text() == "made\n"
    graph = project.cli("graph", "pipeline.yaml", "--json").json
    assert ["early", "late"] in graph["edges"]


def test_verify_reports_a_run_left_running_by_a_dead_process(project: Project) -> None:
    chain(project)
    doc = project.apply()
    db = sqlite3.connect(project.root / ".runner/journal.db")
    db.execute(
        "UPDATE runs SET status='running', pid=? WHERE id=?", (2**22 + 12345, doc["run"]["id"])
    )
    db.commit()
    db.close()
    res = project.cli("verify", "--state", ".runner", "--json")
    assert res.exit_code == 1
    assert "is marked running but its process" in res.json["problems"][0]
    project.apply()  # the next apply marks it interrupted
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True
