"""The files a step's checks read are in its key, and so in the no-op fingerprint (issue 44):
a `json_schema` check's `schema_file`, an `exec` check's declared `inputs:` and the script
file its command runs. Editing one runs the step (and its checks) again."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.conftest import Project
from tests.engine.test_fastpath import converge, fast

SCHEMA = """\
runner: 1
name: schema
steps:
  make:
    uses: template
    with: {text: '{"a": 1}'}
    check:
      - json_schema: {value: "${{ output.text }}", parse: true, schema_file: schema.json}
"""

LOOSE = '{"type": "object", "required": ["a"]}\n'
STRICT = '{"type": "object", "required": ["a", "b"]}\n'


def test_an_edited_schema_file_is_not_answered_by_the_fingerprint(project: Project) -> None:
    project.write("pipeline.yaml", SCHEMA)
    project.write("schema.json", LOOSE)
    converge(project)
    assert fast(project.apply(), project)  # nothing changed: the fingerprint answers
    project.write("schema.json", STRICT)
    planned = project.cli("plan", "pipeline.yaml", "--json").json
    assert planned["would_change"] and planned["summary"]["run"] == 1, planned
    after = project.apply()
    # today's main: the fingerprint did not list schema.json, "nothing changed", exit 0; a
    # fresh apply fails the check (exit 5)
    assert not fast(after, project)
    assert after["_exit"] == 5, after


EXEC = """\
runner: 1
name: scripted
steps:
  make:
    uses: template
    with: {text: "hello"}
    check:
      - exec: {run: "sh check.sh"}
"""


def test_an_edited_check_script_runs_the_check_again(project: Project) -> None:
    project.write("pipeline.yaml", EXEC)
    project.write("check.sh", "exit 0\n")
    first = project.apply()
    assert first["_exit"] == 0, first
    project.write("check.sh", "echo no >&2; exit 1\n")
    second = project.apply()
    # today's main: the script is no part of the key, the cached pass is kept (exit 0)
    assert second["_exit"] == 5, second


def test_a_check_script_is_in_the_fingerprint(project: Project) -> None:
    project.write("pipeline.yaml", EXEC)
    project.write("check.sh", "exit 0\n")
    converge(project)
    assert fast(project.apply(), project)
    project.write("check.sh", "exit 1\n")
    after = project.apply()
    assert not fast(after, project) and after["_exit"] == 5, after


DECLARED = """\
runner: 1
name: declared
steps:
  make:
    uses: template
    with: {text: "hello"}
    check:
      - exec: {run: "grep -q hello allowed.txt", inputs: [allowed.txt]}
"""


def _key(project: Project, doc: dict[str, Any]) -> str:
    db = sqlite3.connect(project.root / ".runner/journal.db")
    try:
        row = db.execute(
            "SELECT key_parts FROM executions WHERE run_id=? AND step_id='make'",
            (doc["run"]["id"],),
        ).fetchone()
    finally:
        db.close()
    return str(row[0])


def test_a_checks_declared_inputs_are_part_of_the_key(project: Project) -> None:
    project.write("pipeline.yaml", DECLARED)
    project.write("allowed.txt", "hello\n")
    first = project.apply()
    assert first["_exit"] == 0, first
    assert "allowed.txt" in _key(project, first)  # named in the key's files, for explain
    project.write("allowed.txt", "goodbye\n")
    second = project.apply()
    assert second["_exit"] == 5, second
    project.write("allowed.txt", "hello\n")
    third = project.apply()  # back as it was: the first result is reused
    assert third["_exit"] == 0 and third["summary"]["cached"] == 1, third


def test_a_declared_input_outside_the_root_is_refused_at_compile_time(project: Project) -> None:
    project.write("pipeline.yaml", DECLARED.replace("[allowed.txt]", "[../secret.txt]"))
    res = project.cli("validate", "pipeline.yaml")
    assert res.exit_code != 0
    assert "secret.txt" in res.stdout + res.stderr
