"""Reads recorded, not predicted (issue 44): a template that includes a file by a computed name
(`{% include "parts/" ~ tone ~ ".j2" %}`) has that file in its key, as the loader recorded
opening it; editing it renders again, on the full path and through the no-op fingerprint."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner.engine.run.files import FileHasher
from runner.engine.run.keys import KeyParts, with_reads
from runner.state.canonical import digest
from tests.conftest import Project
from tests.engine.test_fastpath import converge, fast
from tests.engine.test_keys import values

DYNAMIC = """\
runner: 1
name: tones
params:
  tone: {type: string, default: warm}
steps:
  letter:
    uses: template
    with:
      template: letter.j2
      vars: {tone: "${{ params.tone }}"}
  copy:
    uses: shell
    with:
      run: "printf '%s' ${{ steps.letter.output.text }} > out.txt"
      outputs: [out.txt]
"""


def _project(project: Project) -> None:
    project.write("pipeline.yaml", DYNAMIC)
    project.write("letter.j2", 'Dear reader, {% include "parts/" ~ tone ~ ".j2" %}')
    project.write("parts/warm.j2", "warm regards")
    project.write("parts/cold.j2", "cold regards")


def _out(project: Project, doc: dict[str, Any]) -> str:
    assert doc["_exit"] == 0, doc
    return (project.root / "out.txt").read_text(encoding="utf-8")


def _parts(project: Project, run_id: str, step: str) -> dict[str, Any]:
    db = sqlite3.connect(project.root / ".runner/journal.db")
    try:
        row = db.execute(
            "SELECT key_parts FROM executions WHERE run_id=? AND step_id=?", (run_id, step)
        ).fetchone()
    finally:
        db.close()
    parts: dict[str, Any] = json.loads(row[0])
    return parts


def test_a_dynamically_included_file_edited_renders_again(project: Project) -> None:
    _project(project)
    first = project.apply()
    assert _out(project, first) == "Dear reader, warm regards"
    parts = _parts(project, first["run"]["id"], "letter")
    assert "parts/warm.j2" in parts["files"] and parts["recorded"] == ["parts/warm.j2"]
    project.write("parts/warm.j2", "warmest regards")
    second = project.apply()
    # today's main: the included file was no part of the key, "warm regards" was kept
    assert _out(project, second) == "Dear reader, warmest regards"
    third = project.apply()  # unchanged since: the recorded reads find the last render
    assert third["summary"]["ran"] == 0, third
    project.write("parts/cold.j2", "frosty")  # a file this render never read changes nothing
    assert project.apply()["summary"]["ran"] == 0


def test_the_computed_name_follows_its_param(project: Project) -> None:
    _project(project)
    project.apply()
    cold = project.apply("-p", "tone=cold")
    assert _out(project, cold) == "Dear reader, cold regards"
    warm = project.apply()  # back: the first render is reused, its recorded read unchanged
    assert _out(project, warm) == "Dear reader, warm regards"
    assert [s["status"] for s in warm["steps"]] == ["cached", "cached"], warm


def test_a_recorded_read_and_a_fresh_run_agree_on_the_key(project: Project) -> None:
    """The key of a reused render is the key a run from scratch journals for the same files."""
    _project(project)
    project.apply()
    project.write("parts/warm.j2", "warmest regards")
    incremental = project.apply()
    (project.root / ".runner").rename(project.root / ".old-runner")
    (project.root / "out.txt").unlink()
    fresh = project.apply()
    assert [s["key"] for s in fresh["steps"]] == [s["key"] for s in incremental["steps"]]


def test_the_fingerprint_lists_a_recorded_read(project: Project) -> None:
    _project(project)
    converge(project)
    assert fast(project.apply(), project)
    project.write("parts/warm.j2", "warmest regards")
    planned = project.cli("plan", "pipeline.yaml", "--json").json
    assert planned["would_change"], planned
    after = project.apply()
    assert not fast(after, project)
    assert _out(project, after) == "Dear reader, warmest regards"


INLINE = """\
runner: 1
name: inline
steps:
  t:
    uses: template
    with:
      text: >-
        {% extends "base.j2" %}{% block b %}{% import "macros.j2" as m %}{{ m.hi() }}{% endblock %}
  copy:
    uses: shell
    with:
      run: "printf '%s' ${{ steps.t.output.text }} > out.txt"
      outputs: [out.txt]
"""


def test_imports_and_extends_of_inline_text_are_recorded(project: Project) -> None:
    project.write("pipeline.yaml", INLINE)
    project.write("macros.j2", "{% macro hi() %}hi{% endmacro %}")
    project.write("base.j2", "[{% block b %}{% endblock %}]")
    first = project.apply()
    assert _out(project, first) == "[hi]"
    recorded = _parts(project, first["run"]["id"], "t")["recorded"]
    assert sorted(recorded) == ["base.j2", "macros.j2"]
    project.write("macros.j2", "{% macro hi() %}hello{% endmacro %}")
    assert _out(project, project.apply()) == "[hello]"
    project.write("base.j2", "<{% block b %}{% endblock %}>")
    assert _out(project, project.apply()) == "<hello>"


MISSING = """\
runner: 1
name: missing
steps:
  t:
    uses: template
    with:
      text: '{% include "extra/" ~ "note.j2" ignore missing %}done'
  copy:
    uses: shell
    with:
      run: "printf '%s' ${{ steps.t.output.text }} > out.txt"
      outputs: [out.txt]
"""


def test_a_template_looked_for_and_missing_is_read_when_it_appears(project: Project) -> None:
    project.write("pipeline.yaml", MISSING)
    assert _out(project, project.apply()) == "done"
    assert project.apply()["summary"]["ran"] == 0  # still missing: nothing changed
    project.write("extra/note.j2", "note ")
    assert _out(project, project.apply()) == "note done"


EVERY_KIND = """\
runner: 1
name: every
steps:
  src:
    uses: shell
    with: {run: "cat in.txt > mid.txt", inputs: [in.txt], outputs: [mid.txt]}
  letter:
    uses: template
    with:
      template: letter.j2
      vars: {tone: warm}
    check:
      - json_schema: {value: {a: 1}, schema_file: schema.json}
      - exec: {run: "sh check.sh", inputs: [allowed.txt]}
"""


def test_the_fingerprint_lists_every_file_any_key_names(project: Project) -> None:
    """One list: every file a journaled key names (an input, a static and a computed include,
    a schema file, a check's script and declared input) is one the fingerprint checks."""
    project.write("pipeline.yaml", EVERY_KIND)
    project.write("in.txt", "x\n")
    project.write("letter.j2", '{% include "head.j2" %}{% include "parts/" ~ tone ~ ".j2" %}')
    project.write("head.j2", "Dear reader, ")
    project.write("parts/warm.j2", "warm regards")
    project.write("schema.json", '{"type": "object"}')
    project.write("check.sh", "exit 0\n")
    project.write("allowed.txt", "ok\n")
    last = converge(project)
    db = sqlite3.connect(project.root / ".runner/journal.db")
    try:
        rows = db.execute(  # the parts of the keys the converged (cached) run names
            "SELECT key_parts FROM executions WHERE key_parts IS NOT NULL AND key IN "
            "(SELECT key FROM executions WHERE run_id=?)",
            (last["run"]["id"],),
        ).fetchall()
    finally:
        db.close()
    named = {str(project.root / rel) for (text,) in rows for rel in json.loads(text)["files"]}
    assert {
        str(project.root / rel)
        for rel in (
            "in.txt",
            "letter.j2",
            "head.j2",
            "parts/warm.j2",
            "schema.json",
            "check.sh",
            "allowed.txt",
        )
    } <= named
    [fingerprint] = (project.root / ".runner/converged").glob("*.json")
    listed = set(json.loads(fingerprint.read_text(encoding="utf-8"))["inputs"])
    assert named <= listed, named - listed


FOR_EACH = """\
runner: 1
name: fan
steps:
  letters:
    uses: template
    for_each: [warm, cold]
    with:
      text: '{% include "parts/" ~ tone ~ ".j2" %}'
      vars: {tone: "${{ item }}"}
  copy:
    uses: shell
    with:
      run: "printf '%s' ${{ steps.letters.output[0].text }}${{ steps.letters.output[1].text }} > out.txt"
      outputs: [out.txt]
"""


def test_for_each_elements_record_their_own_reads(project: Project) -> None:
    """Elements whose rows are written whole when they end (held) are keyed by what each read."""
    project.write("pipeline.yaml", FOR_EACH)
    project.write("parts/warm.j2", "W")
    project.write("parts/cold.j2", "C")
    first = project.apply()
    assert _out(project, first) == "WC"
    project.write("parts/cold.j2", "K")
    second = project.apply()
    assert _out(project, second) == "WK"
    [letters] = [s for s in second["steps"] if s["id"] == "letters"]
    assert letters["elements"] == {"total": 2, "ran": 1, "cached": 1}, letters
    assert project.apply()["summary"]["ran"] == 0


def test_verify_rebuild_renders_a_computed_include_again_the_same(project: Project) -> None:
    """`verify --rebuild` keys its copy's executions as the run did, recorded reads included
    (its scratch journal has none of its own: without the real one's, every such template was
    'stale')."""
    from tests.engine.test_rebuild import rebuild, verdicts

    _project(project)
    assert project.apply("--state", ".runner")["_exit"] == 0
    code, doc = rebuild(project, "--all")
    assert code == 0 and verdicts(doc)["letter"] == "same", doc


@given(values, st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=8), max_size=3))
def test_a_key_of_recorded_reads_is_the_digest_of_its_document(
    args: object, reads: dict[str, str]
) -> None:
    """Parts given recorded reads carry the other parts' encodings over: their key is still
    the digest of their whole document, and their base key is the key without the reads."""
    parts = KeyParts("template", "2", args, {"a.j2": "f" * 64}, {}, None)
    base = parts.key()  # encodes every part (what with_reads carries over)
    read = {k: v for k, v in reads.items() if k != "a.j2"}
    with_them = with_reads(parts, Path("/nonexistent"), FileHasher(None), read)
    assert with_them.key() == digest(with_them.as_document())
    assert with_them.base() == base and with_them.recorded == tuple(sorted(read))
    assert with_them.summary()["base"] == base
