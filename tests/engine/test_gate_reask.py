"""A gate asked again (`--reask GATE`, or `--force` of a step before it) is answered by the
decision made in that round, never by the approval it was asked again over (issue 44), and
`plan` / `apply --dry-run` say so before the apply."""

from __future__ import annotations

import pytest

from tests.conftest import Project, statuses
from tests.engine.test_gate import GATED


def _approved(project: Project) -> None:
    """The draft approved and published once."""
    project.write("pipeline.yaml", GATED)
    first = project.apply()
    assert first["_exit"] == 7, first
    res = project.cli("decide", "--no-resume", first["run"]["id"], "review", "approve")
    assert res.exit_code == 0, res.stderr
    assert project.apply()["_exit"] == 0
    assert (project.root / "published/draft.txt").read_text() == "draft \n"


@pytest.mark.parametrize("again", [["--reask", "review"], ["--force", "draft"]])
def test_a_revise_after_asking_again_revises(project: Project, again: list[str]) -> None:
    _approved(project)
    asked = project.apply(*again)
    assert asked["_exit"] == 7, asked
    assert statuses(asked)["review"] == "awaiting_human"
    run_id = asked["run"]["id"]
    res = project.cli(
        "decide", "--quiet", run_id, "review", "revise", "--input", "feedback=shorter"
    )
    # the continuation drafts again with the review and asks about the revised draft; it does
    # not take the approval given before the gate was asked again, nor publish the old draft
    assert res.exit_code == 7, res.stdout + res.stderr
    assert (project.root / "out/draft.txt").read_text() == "draft reviewer feedback: shorter\n"
    assert (project.root / "published/draft.txt").read_text() == "draft \n"
    rows = project.cli("runs", "decisions", run_id, "--json").json["decisions"]
    assert [(r["round"], r["status"], r["decision"]) for r in rows] == [
        (1, "decided", "revise"),
        (2, "pending", None),
    ]


def test_a_question_asked_again_waits_for_its_answer(project: Project) -> None:
    """An apply continuing the asked-again run (no flag this time) waits for the decision the
    reask asked for, rather than taking the approval it was asked over."""
    _approved(project)
    asked = project.apply("--reask", "review")
    assert asked["_exit"] == 7, asked
    plan = project.cli("plan", "pipeline.yaml", "--json").json
    assert {s["id"]: s["action"] for s in plan["steps"]}["review"] == "ask", plan
    again = project.apply()
    assert again["_exit"] == 7 and again["run"]["id"] == asked["run"]["id"], again
