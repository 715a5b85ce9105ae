"""A gate's decision row whose status is NULL (issue 40): every command reading the run's
gates printed a traceback and `runner verify` said ok. Now they say it is damage and name the
repair; verify finds it, repair mends it (the gate asks again), on a real journal."""

from __future__ import annotations

import sqlite3

from tests.conftest import Project

GATE = """\
runner: 1
name: g
steps:
  a: {uses: template, with: {text: "x"}}
  gate: {uses: human_gate, needs: [a], with: {show: "${{ steps.a.output.text }}"}}
"""


def test_a_null_decision_status_is_said_found_and_mended(project: Project) -> None:
    project.write("runner.toml", "")
    project.write("pipeline.yaml", GATE)
    first = project.apply()
    run_id = first["run"]["id"]
    conn = sqlite3.connect(project.root / ".runner" / "journal.db")
    try:
        conn.execute("UPDATE decisions SET status=NULL")
        conn.commit()
    finally:
        conn.close()
    for command in (("runs", "show", run_id), ("runs", "decisions", run_id)):
        res = project.cli(*command)
        assert res.exit_code == 1, (command, res.stdout, res.stderr)
        assert "status is NULL" in res.stderr and "runner verify --repair" in res.stderr
    verify = project.cli("verify", "--json")
    assert verify.exit_code == 1 and "decisions #1: status is NULL" in verify.stdout
    repair = project.cli("verify", "--repair", "--yes", "--json")
    assert repair.exit_code == 0 and repair.json["ok"] is True, repair.stdout
    assert project.cli("verify", "--json").json["ok"] is True
    shown = project.cli("runs", "decisions", run_id)
    assert shown.exit_code == 0 and "superseded" in shown.stdout, shown.stdout
