"""A `runner edit` can be listed and undone (issue 42): `runner edits list` names every edit in
force, `runner edits drop` takes one back and the next apply uses the step's own output again,
downstream files included (the no-op fingerprint of a run that used the edit answers no more)."""

from __future__ import annotations

from tests.conftest import Project

NOTE = """\
    runner: 1
    name: noted
    steps:
      note:
        uses: template
        with: {template: note.j2, vars: {}}
      copy:
        uses: shell
        with:
          run: "printf '%s' ${{ steps.note.output.text }} > out.txt"
          outputs: [out.txt]
"""

GREETS = """\
    runner: 1
    name: greets
    steps:
      greet:
        uses: template
        for_each: "${{ ['ada', 'alan'] }}"
        with: {text: "hello ${{ item }}"}
      all:
        uses: shell
        with:
          run: >-
            printf '%s'
            ${{ steps.greet.elements | map(attribute='output') | map(attribute='text') | join('|') }}
            > all.txt
          outputs: [all.txt]
"""


def _edit(project: Project, run_id: str, step: str, text: str, *element: str) -> None:
    project.write("edit.txt", text)
    res = project.cli("edit", run_id, step, *element, "--from", "edit.txt")
    assert res.exit_code == 0, res.stderr


def test_an_edit_is_listed_dropped_and_the_steps_own_output_comes_back(project: Project) -> None:
    project.write("pipeline.yaml", NOTE)
    project.write("note.j2", "first")
    first = project.apply()
    _edit(project, first["run"]["id"], "note", "mine")
    assert project.apply()["_exit"] == 0
    assert (project.root / "out.txt").read_text() == "mine"
    assert project.apply()["_exit"] == 0  # a no-op while the edit holds
    listed = project.cli("edits", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    [edit] = listed.json["edits"]
    assert (edit["pipeline"], edit["step"], edit["element"], edit["status"]) == (
        "noted",
        "note",
        None,
        "active",
    )
    assert edit["output"]["text"] == "mine"
    text = project.cli("edits", "list").stdout
    assert f"#{edit['id']}" in text and "noted  note  active" in text and "mine" in text

    dropped = project.cli("edits", "drop", "note", "--json")
    assert dropped.exit_code == 0, dropped.stderr
    assert [d["id"] for d in dropped.json["dropped"]] == [edit["id"]]
    assert dropped.json["dropped"][0]["status"] == "dropped"
    assert project.cli("edits", "list", "--json").json["edits"] == []
    everything = project.cli("edits", "list", "--all", "--json").json["edits"]
    assert [(e["id"], e["status"]) for e in everything] == [(edit["id"], "dropped")]

    plan = project.cli("plan", "pipeline.yaml", "--json").json
    assert plan["would_change"] is True, plan
    back = project.apply()
    assert back["_exit"] == 0, back
    assert (project.root / "out.txt").read_text() == "first"  # the step's own output again
    again = project.apply()
    assert again["_exit"] == 0 and (project.root / "out.txt").read_text() == "first"


def test_one_elements_edit_is_dropped_by_id_or_element(project: Project) -> None:
    project.write("pipeline.yaml", GREETS)
    run_id = project.apply()["run"]["id"]
    _edit(project, run_id, "greet", "hi ada", "--element", "0")
    _edit(project, run_id, "greet", "hi alan", "--element", "1")
    edits = project.cli("edits", "list", "--json").json["edits"]
    assert [(e["element"], e["output"]["text"]) for e in edits] == [(0, "hi ada"), (1, "hi alan")]
    said = project.cli("edits", "drop", "greet", "--element", "1")
    assert said.exit_code == 0, said.stderr
    assert said.stdout == (
        f"dropped edit #{edits[1]['id']} of greet[1]; the next apply uses the step's own output\n"
    )
    assert project.apply()["_exit"] == 0
    assert (project.root / "all.txt").read_text() == "hi ada|hello alan"
    shown = project.cli("edits", "list", "--json").json["edits"]
    assert [e["element"] for e in shown] == [0]
    res = project.cli("edits", "drop", "--id", str(edits[0]["id"]))
    assert res.exit_code == 0, res.stderr
    assert project.cli("edits", "list", "--json").json["edits"] == []


def test_dropping_nothing_says_what_is_there(project: Project) -> None:
    project.write("pipeline.yaml", GREETS)
    run_id = project.apply()["run"]["id"]
    _edit(project, run_id, "greet", "hi ada", "--element", "0")
    missing = project.cli("edits", "drop", "nope")
    assert missing.exit_code == 3
    assert "no edit in force for step 'nope'" in missing.stderr
    assert "greet" in missing.stderr  # the hint names the edits there are
    neither = project.cli("edits", "drop")
    assert neither.exit_code == 2 and "a STEP or --id N" in neither.stderr
    both = project.cli("edits", "drop", "greet", "--id", "1")
    assert both.exit_code == 2
    helped = project.cli("edits", "drop", "--help")
    assert "Example: runner edits drop detail --element 2" in helped.stdout
