"""A gate's rounds count its decisions, not the times its inputs moved; gc says which decisions it
forgets with their runs (a later apply asks those gates again) (issue 44)."""

from __future__ import annotations

from tests.conftest import Project, statuses

WORDED = """\
    runner: 1
    name: worded
    params:
      word: {type: string, default: one}
    steps:
      draft:
        uses: shell
        with: {run: "echo 'draft ${{ params.word }}'"}
      review:
        uses: human_gate
        with:
          summary: "Publish?"
          show: {draft: "${{ steps.draft.output.stdout }}"}
      publish:
        uses: shell
        needs: [review]
        with: {run: "echo published"}
"""


def _rounds(project: Project, run_id: str) -> list[tuple[int, str]]:
    res = project.cli("runs", "decisions", run_id, "--json")
    assert res.exit_code == 0, res.stderr
    return [(r["round"], r["status"]) for r in res.json["decisions"]]


def test_inputs_that_change_and_change_back_ask_in_the_same_round(project: Project) -> None:
    project.write("pipeline.yaml", WORDED)
    first = project.apply()
    run_id = first["run"]["id"]
    assert project.apply("-p", "word=two")["_exit"] == 7
    back = project.apply()
    assert back["_exit"] == 7 and back["run"]["id"] == run_id
    # nothing was decided: every question is round 1, the one asked now pending
    assert _rounds(project, run_id) == [(1, "superseded"), (1, "superseded"), (1, "pending")]


def test_gc_says_which_decisions_it_forgets(project: Project) -> None:
    project.write("pipeline.yaml", WORDED)
    first = project.apply()
    res = project.cli("decide", "--no-resume", first["run"]["id"], "review", "approve")
    assert res.exit_code == 0, res.stderr
    assert project.apply()["_exit"] == 0
    waiting = project.apply("-p", "word=two")
    assert waiting["_exit"] == 7
    said = project.cli("gc", "--keep-last", "1", "--dry-run")
    assert "would forget approve by" in said.stdout and "gate 'review'" in said.stdout
    gone = project.cli("gc", "--keep-last", "1", "--json").json
    assert gone["runs_deleted"] == [first["run"]["id"]]
    [forgotten] = gone["decisions_forgotten"]
    assert forgotten["gate"] == "review" and forgotten["decision"] == "approve"
    assert forgotten["run"] == first["run"]["id"]
    # as gc said: the inputs decided before come back and the gate asks again, in round 1
    again = project.apply()
    assert again["_exit"] == 7 and statuses(again)["review"] == "awaiting_human"
    assert _rounds(project, waiting["run"]["id"]) == [(1, "superseded"), (1, "pending")]


def test_gc_forgets_no_approval_a_kept_run_answers_from(project: Project) -> None:
    project.write("pipeline.yaml", WORDED)
    first = project.apply()
    project.cli("decide", "--no-resume", first["run"]["id"], "review", "approve")
    assert project.apply()["_exit"] == 0
    assert project.apply()["_exit"] == 0  # a second run, answered from the approval
    gone = project.cli("gc", "--keep-last", "1", "--json").json
    assert gone["runs_deleted"] and gone["decisions_forgotten"] == []
    assert statuses(project.apply())["review"] == "cached"
