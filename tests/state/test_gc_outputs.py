"""gc forgets a run's records, not that runner wrote its outputs (issue 44): after `gc
--keep-last 0` deleted every record of an output still in the workspace, the step's next run
writes over it, with `on_edit: fail` too, as a fresh apply does; a real hand edit is still one."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import Project, statuses

PIPE = """\
    runner: 1
    name: forgotten
    defaults: {on_edit: POLICY}
    params:
      word: {type: string, default: one}
    steps:
      make:
        uses: shell
        with:
          run: "mkdir -p out && echo ${{ params.word }} > out/made.txt"
          outputs: [out/made.txt]
"""


def _gc_all(project: Project) -> None:
    res = project.cli("gc", "--keep-last", "0", "--state", ".runner", "--json")
    assert res.exit_code == 0, res.stderr
    assert res.json["runs_deleted"] and res.json["objects_deleted"] >= 1, res.json


def _plan_of_make(project: Project, *params: str) -> dict[str, object]:
    plan = project.cli("plan", "pipeline.yaml", "--json", *params).json
    make: dict[str, object] = next(s for s in plan["steps"] if s["id"] == "make")
    return make


@pytest.mark.parametrize("policy", ["fail", "restore"])
def test_an_output_whose_records_gc_deleted_is_runners_own(project: Project, policy: str) -> None:
    project.write("pipeline.yaml", PIPE.replace("POLICY", policy))
    out = project.root / "out/made.txt"
    assert project.apply()["_exit"] == 0
    _gc_all(project)  # "one" is in the workspace, in no record and no object any more
    assert _plan_of_make(project, "-p", "word=two")["action"] == "run"
    again = project.apply("-p", "word=two")
    assert again["_exit"] == 0, again["_stderr"]
    assert statuses(again)["make"] == "ran" and out.read_text() == "two\n"
    assert "edited by hand" not in again["_stderr"]
    # gc again, then back to "one": the step runs (no record) over the forgotten "two"
    _gc_all(project)
    back = project.apply()
    assert back["_exit"] == 0, back["_stderr"]
    assert out.read_text() == "one\n" and "edited by hand" not in back["_stderr"]
    # gc remembers only digests of what it deleted: a real hand edit is still one
    out.write_text("mine\n")
    edited = project.apply("-p", "word=two")
    if policy == "fail":
        assert edited["_exit"] == 4 and out.read_text() == "mine\n"
        assert "edited by hand" in edited["_stderr"]
    else:
        assert edited["_exit"] == 0 and out.read_text() == "two\n"


def test_gc_remembers_the_digests_of_the_outputs_it_forgets(project: Project) -> None:
    project.write("pipeline.yaml", PIPE.replace("POLICY", "fail"))
    assert project.apply()["_exit"] == 0
    journal = project.root / ".runner/journal.db"
    with sqlite3.connect(journal) as conn:
        (files,) = conn.execute("SELECT files FROM executions WHERE step_id='make'").fetchone()
    _gc_all(project)
    with sqlite3.connect(journal) as conn:
        rows = conn.execute("SELECT path, digest FROM forgotten_outputs").fetchall()
    assert rows == list(json.loads(files).items()) and rows[0][0] == "out/made.txt"
