"""Reads recorded, shared (issue 44): a template that includes a file by a computed name is
answered by the team's remote cache in a clone where it never ran, its recorded reads hashed as
they are in that clone: the same files give the pushed result, an edited one renders again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Project, statuses

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
"""


def _clone(root: Path, remote: Path, push: str) -> Project:
    project = Project(root)
    project.write("pipeline.yaml", DYNAMIC)
    project.write("letter.j2", 'Dear reader, {% include "parts/" ~ tone ~ ".j2" %}')
    project.write("parts/warm.j2", "warm regards")
    project.write("parts/cold.j2", "cold regards")
    project.write(
        "runner.toml",
        f'[general]\ndefault_provider = "fake"\n\n[cache]\nremote = "{remote.as_uri()}"\n'
        f'writable = true\npush = "{push}"\n',
    )
    return project


def _letter(project: Project, doc: dict[str, Any]) -> tuple[str, str]:
    """What the apply did with the letter, and the letter's text."""
    assert doc["_exit"] == 0, doc["_stderr"]
    shown = project.cli("runs", "show", doc["run"]["id"], "--json").json
    [row] = [e for e in shown["executions"] if e["step_id"] == "letter"]
    output = json.loads(row["output"]) if isinstance(row["output"], str) else row["output"]
    return statuses(doc)["letter"], output["text"]


@pytest.mark.parametrize("push", ["apply", "manual"])
def test_a_computed_include_is_answered_by_the_remote(tmp_path: Path, push: str) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    mine = _clone(tmp_path / "mine", remote, push)
    assert _letter(mine, mine.apply()) == ("ran", "Dear reader, warm regards")
    if push == "manual":
        res = mine.cli("cache", "push", "--json")
        assert res.exit_code == 0 and res.json["pushed"] == 1, res.stderr
    # a colleague's clone: the same sources, an empty state
    theirs = _clone(tmp_path / "theirs", remote, push)
    doc = theirs.apply()
    assert _letter(theirs, doc) == ("cached", "Dear reader, warm regards")
    assert doc["remote"]["hits"] == 1, doc["remote"]
    # the recorded reads are keyed as they are here: an edited include renders again
    shutil.rmtree(theirs.root / ".runner")
    theirs.write("parts/warm.j2", "warmest regards")
    doc = theirs.apply()
    assert _letter(theirs, doc) == ("ran", "Dear reader, warmest regards")
    assert doc["remote"]["hits"] == 0, doc["remote"]
