"""`runner plan` says what `on_edit` makes the apply do with an output edited by hand (issue
44): with `on_edit: fail` the step fails (answered from the cache, or about to run again), and
its dependents are skipped; with `keep` the edit is left as is; with `restore` it is put back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Project, statuses

PIPE = """\
    runner: 1
    name: edited
    defaults: {on_edit: POLICY}
    params:
      word: {type: string, default: one}
    steps:
      make:
        uses: shell
        with:
          run: "mkdir -p out && echo ${{ params.word }} > out/made.txt"
          outputs: [out/made.txt]
      note:
        uses: template
        needs: [make]
        with: {template: note.j2, vars: {said: "${{ steps.make.output.stdout }}"}}
"""

# (policy, change the step's input too) -> what plan says of make, and of note
EXPECTED = {
    ("fail", False): ("fail", "skip"),
    ("fail", True): ("fail", "skip"),
    ("keep", False): ("cached", "cached"),
    ("restore", False): ("restore", "cached"),
}
# what the apply then does with make
DONE = {"fail": "failed", "restore": "cached", "keep": "cached"}


def _actions(project: Project, *params: str) -> dict[str, Any]:
    plan = project.cli("plan", "pipeline.yaml", "--json", *params)
    assert plan.exit_code == 0, plan.stderr
    return {s["id"]: s for s in plan.json["steps"]}


@pytest.mark.parametrize(("policy", "rerun"), list(EXPECTED))
def test_plan_says_what_on_edit_does_with_a_hand_edit(
    project: Project, policy: str, rerun: bool
) -> None:
    project.write("pipeline.yaml", PIPE.replace("POLICY", policy))
    project.write("note.j2", "said {{ said }}")
    out = project.root / "out/made.txt"
    assert project.apply()["_exit"] == 0
    out.write_text("mine\n")
    params = ("-p", "word=two") if rerun else ()
    said = _actions(project, *params)
    make, note = EXPECTED[(policy, rerun)]
    assert (said["make"]["action"], said["note"]["action"]) == (make, note), said
    reasons = " ".join(said["make"]["reasons"])
    assert "out/made.txt was edited by hand" in reasons, reasons
    if policy == "fail":
        assert "on_edit: fail" in reasons and "would fail" in reasons, reasons
        assert "upstream 'make' would fail" in said["note"]["reasons"], said["note"]
    doc = project.apply(*params)
    assert statuses(doc)["make"] == DONE[policy], doc
    if policy == "fail":
        assert statuses(doc)["note"] == "skipped", doc
    assert doc["_exit"] == (4 if policy == "fail" else 0), doc["_stderr"]
    assert out.read_text() == ("one\n" if policy == "restore" else "mine\n")


UPSTREAM = """\
    runner: 1
    name: upstream
    defaults: {on_edit: fail}
    params:
      word: {type: string, default: one}
    steps:
      word:
        uses: shell
        with: {run: "echo ${{ params.word }}"}
      make:
        uses: shell
        with:
          run: 'mkdir -p out && printf "%s" "$WORD" > out/made.txt'
          env: {WORD: "${{ steps.word.output.stdout }}"}
          outputs: [out/made.txt]
"""


def test_an_element_whose_key_is_not_known_yet_fails_all_the_same(project: Project) -> None:
    """Its upstream would run, so whether it is cached or runs is not known: with on_edit:
    fail and its output edited by hand, it fails either way, and plan says so."""
    project.write("pipeline.yaml", UPSTREAM)
    out = project.root / "out/made.txt"
    assert project.apply()["_exit"] == 0 and out.read_text() == "one\n"
    out.write_text("mine\n")
    said = _actions(project, "-p", "word=two")
    assert said["word"]["action"] == "run", said
    assert said["make"]["action"] == "fail", said
    assert "out/made.txt was edited by hand" in " ".join(said["make"]["reasons"]), said
    doc = project.apply("-p", "word=two")
    assert doc["_exit"] == 6 and statuses(doc) == {"word": "ran", "make": "failed"}, doc
    assert out.read_text() == "mine\n"
