"""An input that changes while its step runs: the result is what the command made, and this
run uses it, but it is not kept under the key of the old bytes, since a later apply with those
bytes back would reuse a result made from others."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import Project, ran

SLOW_READER = """\
runner: 1
name: p
steps:
  copy:
    uses: shell
    with:
      run: "touch out/started && sleep 0.6 && cat in.txt > out/copy.txt"
      inputs: [in.txt]
      outputs: [out/copy.txt]
  after:
    uses: shell
    needs: [copy]
    with: {run: "cat out/copy.txt > out/after.txt", inputs: [out/copy.txt], outputs: [out/after.txt]}
"""


def _edit_soon(path: Path, text: str) -> threading.Thread:
    """Write ``text`` to ``path`` once the slow step's command has started."""
    started = path.parent / "out" / "started"

    def edit() -> None:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        path.write_text(text)

    thread = threading.Thread(target=edit)
    thread.start()
    return thread


@pytest.mark.parametrize("edit", ["edited\n", "EDITED\n"], ids=["other size", "same size"])
def test_an_input_edited_while_its_step_ran_is_not_kept_under_the_old_key(
    project: Project, edit: str
) -> None:
    project.write("pipeline.yaml", SLOW_READER)
    source = project.write("in.txt", "edited\n" if edit == "EDITED\n" else "original\n")
    original = source.read_text()
    (project.root / "out").mkdir()
    editor = _edit_soon(source, edit)
    first = project.apply()
    editor.join()
    assert ran(first) == {"copy", "after"}  # the run goes on with what the command made
    assert (project.root / "out" / "after.txt").read_text() == edit
    assert "input in.txt changed while the step ran" in first["_stderr"]
    shown = project.cli("runs", "show", first["run"]["id"], "--json")
    row = next(e for e in shown.json["executions"] if e["step_id"] == "copy")
    assert row["key"].startswith("unkept:") and row["status"] == "completed"
    db = sqlite3.connect(project.root / ".runner" / "journal.db")
    try:
        (contract,) = db.execute(
            "SELECT contract FROM executions WHERE step_id='copy' AND run_id=?",
            (first["run"]["id"],),
        ).fetchone()
    finally:
        db.close()
    assert contract == row["key"]  # no hand edit of it is taken for the old bytes either
    # The old bytes back: the step runs again, on them, and nothing made from others is reused.
    source.write_text(original)
    second = project.apply()
    assert ran(second) == {"copy", "after"}
    assert (project.root / "out" / "copy.txt").read_text() == original
    assert project.apply()["summary"]["cached"] == 2


def test_a_touch_while_the_step_ran_keeps_the_result(project: Project) -> None:
    """Only the bytes count: a new mtime with the same content is the same input."""
    project.write("pipeline.yaml", SLOW_READER)
    source = project.write("in.txt", "original\n")
    (project.root / "out").mkdir()
    editor = _edit_soon(source, "original\n")
    doc = project.apply()
    editor.join()
    assert ran(doc) == {"copy", "after"}


def test_a_step_editing_its_own_input_in_place_is_not_refused(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          fmt:
            uses: shell
            with: {run: "echo formatted >> data.txt", inputs: [data.txt], outputs: [data.txt]}
        """,
    )
    project.write("data.txt", "raw\n")
    doc = project.apply()
    assert ran(doc) == {"fmt"}


def test_the_warning_shows_a_hostile_input_name_as_data(project: Project) -> None:
    name = "in $(touch pwned) `touch pwned2` 'q' <script>.txt"
    # the command names the file by a parameter (its value reaches the shell as data); a glob
    # would list the project's directory, which the sandbox refuses
    pipeline = (
        SLOW_READER.replace(
            "name: p\n",
            f"name: p\nparams: {{src: {{type: string, default: {json.dumps(name)}}}}}\n",
        )
        .replace("inputs: [in.txt]", f"inputs: [{json.dumps(name)}]")
        .replace("cat in.txt", "cat ${{ params.src }}")
    )
    project.write("pipeline.yaml", pipeline)
    source = project.write(name, "original\n")
    (project.root / "out").mkdir()
    editor = _edit_soon(source, "edited\n")
    doc = project.apply()
    editor.join()
    assert ran(doc) == {"copy", "after"}
    assert f"input {name} changed while the step ran" in doc["_stderr"]
    assert not (project.root / "pwned").exists() and not (project.root / "pwned2").exists()
