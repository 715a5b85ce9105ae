"""A `runner edit` is a result of its inputs (issue 44): set aside when they change, it comes back
when they are put back exactly; a for_each element's edit follows what the element is (its item),
not its index, so reordering the list keeps it."""

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


def _edit(project: Project, run_id: str, step: str, text: str, *element: str) -> None:
    project.write("edit.txt", text)
    res = project.cli("edit", run_id, step, *element, "--from", "edit.txt")
    assert res.exit_code == 0, res.stderr


def _plan(project: Project, step: str) -> list[str]:
    doc = project.cli("plan", "pipeline.yaml", "--json").json
    found = next(s for s in doc["steps"] if s["id"] == step)
    return [r for e in (found.get("elements") or [found]) for r in e["reasons"]]


def test_an_edit_without_contract_comes_back_with_its_inputs(project: Project) -> None:
    project.write("pipeline.yaml", NOTE)
    project.write("note.j2", "first")
    first = project.apply()
    assert first["_exit"] == 0 and (project.root / "out.txt").read_text() == "first"
    _edit(project, first["run"]["id"], "note", "mine")
    assert project.apply()["_exit"] == 0
    assert (project.root / "out.txt").read_text() == "mine"
    project.write("note.j2", "second")  # an input changes: the edit is set aside
    assert project.apply()["_exit"] == 0
    assert (project.root / "out.txt").read_text() == "second"
    project.write("note.j2", "first")  # and is put back exactly: the edit holds again
    assert any("holds again" in r for r in _plan(project, "note")), _plan(project, "note")
    back = project.apply()
    assert back["_exit"] == 0, back
    assert (project.root / "out.txt").read_text() == "mine"
    assert any("holds" in r for r in _plan(project, "note"))


GREETS = """\
    runner: 1
    name: greets
    steps:
      names:
        uses: read
        with: {path: names.yaml, as: yaml}
      greet:
        uses: template
        for_each: "${{ steps.names.output.data }}"
        contract: "${{ item }}"
        with: {template: greet.j2, vars: {name: "${{ item }}"}}
      all:
        uses: shell
        with:
          run: >-
            printf '%s'
            ${{ steps.greet.elements | map(attribute='output') | map(attribute='text') | join('|') }}
            > all.txt
          outputs: [all.txt]
"""


def test_an_element_edit_follows_its_item_when_the_list_is_reordered(project: Project) -> None:
    project.write("pipeline.yaml", GREETS)
    project.write("greet.j2", "hello {{ name }}")
    project.write("names.yaml", "[a, b, c]\n")
    first = project.apply()
    assert first["_exit"] == 0
    _edit(project, first["run"]["id"], "greet", "dear b", "--element", "1")
    assert project.apply()["_exit"] == 0
    assert (project.root / "all.txt").read_text() == "hello a|dear b|hello c"
    project.write("names.yaml", "[b, a, c]\n")  # each element's card (its item) unchanged
    plan = _plan(project, "greet")
    assert not any("set aside" in r for r in plan), plan
    moved = project.apply()
    assert moved["_exit"] == 0, moved
    assert (project.root / "all.txt").read_text() == "dear b|hello a|hello c"
    project.write("names.yaml", "[a, b, c]\n")  # the order put back
    assert project.apply()["_exit"] == 0
    assert (project.root / "all.txt").read_text() == "hello a|dear b|hello c"
    # an element whose card changed is regenerated; put back, its edit comes back
    project.write("names.yaml", "[a, B, c]\n")
    assert project.apply()["_exit"] == 0
    assert (project.root / "all.txt").read_text() == "hello a|hello B|hello c"
    project.write("names.yaml", "[a, b, c]\n")
    assert project.apply()["_exit"] == 0
    assert (project.root / "all.txt").read_text() == "hello a|dear b|hello c"
