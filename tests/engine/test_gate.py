"""human_gate: suspend (exit 7), decide, resume; approve, reject, revise; decision errors."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import Project, statuses

GATED = """\
    runner: 1
    name: gated
    phases: [make, check, ship]
    steps:
      draft:
        uses: shell
        phase: make
        with:
          run: >-
            mkdir -p out && echo 'draft ${{ feedback | join(",") }}' > out/draft.txt
            && cat out/draft.txt
          outputs: [out/draft.txt]
      other:
        uses: shell
        phase: make
        with: {run: "echo independent"}
      review:
        uses: human_gate
        phase: check
        with:
          summary: "Publish this draft?"
          show: {draft: "${{ steps.draft.output.stdout }}"}
          revise: draft
      publish:
        uses: shell
        phase: ship
        needs: [review, other]
        with:
          run: "mkdir -p published && cp out/draft.txt published/draft.txt"
          inputs: [out/draft.txt]
          outputs: [published/draft.txt]
"""


def _suspended(project: Project) -> dict[str, Any]:
    project.write("pipeline.yaml", GATED)
    doc = project.apply()
    assert doc["_exit"] == 7, doc
    return doc


def _decisions(project: Project, run_id: str) -> list[dict[str, Any]]:
    res = project.cli("runs", "decisions", run_id, "--state", ".runner", "--json")
    assert res.exit_code == 0, res.stderr
    rows: list[dict[str, Any]] = res.json["decisions"]
    return rows


def test_gate_suspends_with_a_pending_decision(project: Project) -> None:
    doc = _suspended(project)
    run_id = doc["run"]["id"]
    assert doc["run"]["status"] == "awaiting_human"
    assert statuses(doc) == {
        "draft": "ran",
        "other": "ran",
        "review": "awaiting_human",
        "publish": "skipped",
    }
    [row] = _decisions(project, run_id)
    assert row["status"] == "pending" and row["round"] == 1 and row["decision"] is None
    assert row["summary"]["summary"] == "Publish this draft?"
    assert row["summary"]["show"] == {"draft": "draft \n"}
    assert not (project.root / "published").exists()
    listed = project.cli("runs", "list", "--awaiting", "--state", ".runner", "--json").json
    assert [r["id"] for r in listed["runs"]] == [run_id]
    # an apply without a decision stays suspended: same run, no new round
    again = project.apply()
    assert again["_exit"] == 7 and again["run"]["id"] == run_id
    assert len(_decisions(project, run_id)) == 1


def test_approve_continues_the_same_run_and_completes(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    res = project.cli(
        "decide",
        "--no-resume",
        run_id,
        "review",
        "approve",
        "--by",
        "alice",
        "--comment",
        "ok",
        "--state",
        ".runner",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    artifact = res.json["decision"]["artifact"]
    assert (project.root / ".runner" / "objects").exists() and artifact
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    assert doc["run"]["id"] == run_id and doc["run"]["status"] == "completed"
    assert statuses(doc) == {
        "draft": "cached",
        "other": "cached",
        "review": "ran",
        "publish": "ran",
    }
    assert (project.root / "published/draft.txt").read_text() == "draft \n"
    [row] = _decisions(project, run_id)
    assert (row["decision"], row["by"], row["comment"]) == ("approve", "alice", "ok")
    shown = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json
    assert shown["run"]["status"] == "completed"
    events = project.cli("runs", "events", run_id, "--state", ".runner").stdout.splitlines()
    types = [__import__("json").loads(line)["type"] for line in events]
    assert "GateAwaiting" in types and "GateDecided" in types
    # nothing changed: a fresh apply converges without asking again
    fresh = project.apply()
    assert fresh["_exit"] == 0 and set(statuses(fresh).values()) == {"cached"}


def test_reject_ends_the_run_and_publishes_nothing(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    assert (
        project.cli(
            "decide",
            "--no-resume",
            run_id,
            "review",
            "reject",
            "--comment",
            "no",
            "--state",
            ".runner",
        ).exit_code
        == 0
    )
    res = project.cli("resume", run_id, "--state", ".runner", "--json")
    assert res.exit_code == 8, res.stderr
    doc = res.json
    assert doc["run"]["status"] == "rejected"
    assert statuses(doc)["review"] == "rejected" and statuses(doc)["publish"] == "skipped"
    assert not (project.root / "published").exists()
    execs = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json["executions"]
    assert "publish" not in {e["step_id"] for e in execs}
    again = project.cli("decide", "--no-resume", run_id, "review", "approve", "--state", ".runner")
    assert again.exit_code == 2 and "not waiting" in again.stderr


def test_revise_reruns_exactly_the_target_and_downstream_then_asks_again(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    res = project.cli(
        "decide",
        "--no-resume",
        run_id,
        "review",
        "revise",
        "--input",
        "feedback=shorter",
        "--state",
        ".runner",
    )
    assert res.exit_code == 0, res.stderr
    doc = project.apply()
    assert doc["_exit"] == 7 and doc["run"]["id"] == run_id
    assert statuses(doc) == {
        "draft": "ran",
        "other": "cached",
        "review": "awaiting_human",
        "publish": "skipped",
    }
    assert (project.root / "out/draft.txt").read_text() == "draft reviewer feedback: shorter\n"
    rows = _decisions(project, run_id)
    assert [(r["round"], r["status"], r["decision"]) for r in rows] == [
        (1, "decided", "revise"),
        (2, "pending", None),
    ]
    assert rows[1]["summary"]["show"]["draft"] == "draft reviewer feedback: shorter\n"
    assert (
        project.cli(
            "decide", "--no-resume", run_id, "review", "approve", "--state", ".runner"
        ).exit_code
        == 0
    )
    done = project.apply()
    assert done["_exit"] == 0
    assert statuses(done) == {
        "draft": "cached",
        "other": "cached",
        "review": "ran",
        "publish": "ran",
    }
    published = (project.root / "published/draft.txt").read_text()
    assert published == "draft reviewer feedback: shorter\n"


def test_decision_errors(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    unknown_run = project.cli(
        "decide", "--no-resume", "nope-nope", "review", "approve", "--state", ".runner"
    )
    assert unknown_run.exit_code == 3 and "unknown run" in unknown_run.stderr
    unknown_gate = project.cli(
        "decide", "--no-resume", run_id, "publish", "approve", "--state", ".runner"
    )
    assert unknown_gate.exit_code == 3 and "no gate 'publish'" in unknown_gate.stderr
    assert (
        project.cli(
            "decide", "--no-resume", run_id, "review", "approve", "--state", ".runner"
        ).exit_code
        == 0
    )
    twice = project.cli("decide", "--no-resume", run_id, "review", "reject", "--state", ".runner")
    assert twice.exit_code == 2 and "already decided" in twice.stderr
    bad_input = project.cli(
        "decide",
        "--no-resume",
        run_id,
        "review",
        "revise",
        "--input",
        "novalue",
        "--state",
        ".runner",
    )
    assert bad_input.exit_code == 2


def test_gate_changes_make_an_earlier_decision_void(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    assert (
        project.cli(
            "decide", "--no-resume", run_id, "review", "approve", "--state", ".runner"
        ).exit_code
        == 0
    )
    # what the reviewer saw changes before the run resumes: the approval does not carry over
    project.write("pipeline.yaml", GATED.replace("'draft ", "'edited "))
    doc = project.apply()
    assert doc["_exit"] == 7 and statuses(doc)["draft"] == "ran"
    rows = _decisions(project, run_id)
    assert [(r["round"], r["status"]) for r in rows] == [(1, "decided"), (2, "pending")]
    assert not (project.root / "published").exists()


def test_progress_per_phase(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    run = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json["run"]
    assert run["progress"] == {
        "make": {"total": 2, "done": 2, "skipped": 0, "failed": 0, "waiting": 0},
        "check": {"total": 1, "done": 0, "skipped": 0, "failed": 0, "waiting": 1},
        "ship": {"total": 1, "done": 0, "skipped": 1, "failed": 0, "waiting": 0},
    }
    assert run["current_phase"] == "check"


def test_revise_target_must_exist(project: Project) -> None:
    project.write("pipeline.yaml", GATED.replace("revise: draft", "revise: drfat"))
    res = project.cli("apply", "pipeline.yaml")
    assert res.exit_code == 2 and "unknown step 'drfat'" in res.stderr


def test_runs_show_lists_decisions(project: Project) -> None:
    doc = _suspended(project)
    run_id = doc["run"]["id"]
    shown = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json
    assert [(d["gate"], d["status"]) for d in shown["decisions"]] == [("review", "pending")]
    res = project.cli(
        "decide",
        "--no-resume",
        run_id,
        "review",
        "approve",
        "--by",
        "ana",
        "--comment",
        "ship it",
        "--state",
        ".runner",
    )
    assert res.exit_code == 0, res.stderr
    text = project.cli("runs", "show", run_id, "--state", ".runner").stdout
    assert "Decisions" in text and "comment  ship it" in text
    assert re.search(r"review\s+1\s+approve\s+ana\s+\d{4}-", text), text
    shown = project.cli("runs", "show", run_id, "--state", ".runner", "--json").json
    assert shown["decisions"][0]["decision"] == "approve" and shown["decisions"][0]["by"] == "ana"


# -- a decision is a result of the gate's inputs (issue 28) ------------------------------------


def _decide(project: Project, run_id: str, *args: str) -> None:
    res = project.cli("decide", "--no-resume", run_id, "review", *args, "--state", ".runner")
    assert res.exit_code == 0, res.stderr


def test_an_approved_revision_is_given_again_by_the_next_apply(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    _decide(project, run_id, "revise", "--input", "feedback=shorter")
    assert project.apply()["_exit"] == 7  # round 2 shows the revised draft
    _decide(project, run_id, "approve")
    assert project.apply()["_exit"] == 0
    plan = project.cli("plan", "pipeline.yaml", "--json", "--state", ".runner").json
    assert plan["would_change"] is False, plan
    actions = {s["id"]: s["action"] for s in plan["steps"]}
    assert actions == {"draft": "cached", "other": "cached", "review": "cached", "publish": "cached"}
    again = project.apply()  # nothing changed: the revision and its approval are given again
    assert again["_exit"] == 0, again
    assert again["run"]["id"] != run_id
    assert statuses(again)["review"] == "cached" and statuses(again)["publish"] == "cached"
    published = (project.root / "published/draft.txt").read_text()
    assert published == "draft reviewer feedback: shorter\n"
    assert (project.root / "out/draft.txt").read_text() == "draft reviewer feedback: shorter\n"
    # every decision the re-applied run rests on: the revision and the approval that let it
    # publish (issue 42), in the CLI, its --json and `runs show`
    rows = _decisions(project, again["run"]["id"])
    assert [(r["round"], r["decision"], r["summary"].get("remembered_from")) for r in rows] == [
        (1, "revise", run_id),
        (2, "approve", run_id),
    ]
    shown = project.cli("runs", "show", again["run"]["id"], "--state", ".runner")
    assert re.search(r"review +1 +revise", shown.stdout), shown.stdout
    assert re.search(r"review +2 +approve", shown.stdout), shown.stdout
    assert shown.stdout.count(f"given again from run {run_id}") == 2
    doc = project.cli("runs", "show", again["run"]["id"], "--state", ".runner", "--json").json
    assert [d["decision"] for d in doc["decisions"]] == ["revise", "approve"]


def test_a_rejection_is_given_again_until_the_gate_is_reasked(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    _decide(project, run_id, "reject", "--comment", "off brand")
    assert project.cli("resume", run_id, "--state", ".runner").exit_code == 8
    plan = project.cli("plan", "pipeline.yaml", "--json", "--state", ".runner").json
    actions = {s["id"]: s["action"] for s in plan["steps"]}
    assert actions["review"] == "cached" and actions["publish"] == "skip", plan
    again = project.apply()
    assert again["_exit"] == 8, again  # not asked about the same draft again
    assert again["run"]["status"] == "rejected"
    assert statuses(again)["review"] == "rejected" and statuses(again)["publish"] == "skipped"
    review = next(s for s in again["steps"] if s["id"] == "review")
    assert "rejected before with the same inputs" in review["reason"]
    assert "--reask review" in review["reason"]
    assert not (project.root / "published").exists()
    asked = project.apply("--reask", "review")
    assert asked["_exit"] == 7 and statuses(asked)["review"] == "awaiting_human"
    _decide(project, asked["run"]["id"], "approve")
    done = project.apply()
    assert done["_exit"] == 0 and (project.root / "published/draft.txt").exists()
    # the latest decision on these inputs wins: now approved, the next apply is cached
    latest = project.apply()
    assert latest["_exit"] == 0 and statuses(latest)["review"] == "cached"


def test_a_changed_draft_is_asked_about_though_the_old_one_was_rejected(project: Project) -> None:
    run_id = _suspended(project)["run"]["id"]
    _decide(project, run_id, "reject")
    assert project.cli("resume", run_id, "--state", ".runner").exit_code == 8
    project.write("pipeline.yaml", GATED.replace("'draft ", "'second "))
    doc = project.apply()
    assert doc["_exit"] == 7 and statuses(doc)["review"] == "awaiting_human"


def test_reask_names_a_gate(project: Project) -> None:
    project.write("pipeline.yaml", GATED)
    res = project.cli("apply", "pipeline.yaml", "--reask", "draft", "--state", ".runner")
    assert res.exit_code == 2 and "not a human_gate" in res.stderr


def test_an_image_swapped_under_its_name_is_asked_about_again(project: Project) -> None:
    """A decision is about what the reviewer saw: an approval of shot.png does not carry over
    to another picture saved under the same name."""
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: shots
        steps:
          review:
            uses: human_gate
            with: {summary: "Use this shot?", images: [shot.png]}
        """,
    )
    (project.root / "shot.png").write_bytes(b"first picture")
    first = project.apply()
    assert first["_exit"] == 7
    _decide(project, first["run"]["id"], "approve")
    assert project.apply()["_exit"] == 0
    assert project.apply()["_exit"] == 0  # the same picture: approved before
    (project.root / "shot.png").write_bytes(b"another picture")
    again = project.apply()
    assert again["_exit"] == 7 and statuses(again)["review"] == "awaiting_human"


def test_a_revision_holds_only_for_the_draft_it_was_asked_about(project: Project) -> None:
    """A run waiting after a revision, whose draft's inputs then change, asks about the new
    draft as a fresh run would: the old review (about another draft) is not applied to it."""
    run_id = _suspended(project)["run"]["id"]
    _decide(project, run_id, "revise", "--input", "feedback=shorter")
    project.write("pipeline.yaml", GATED.replace("'draft ", "'edited "))
    doc = project.apply()
    assert doc["_exit"] == 7 and doc["run"]["id"] == run_id
    assert (project.root / "out/draft.txt").read_text() == "edited \n"
    rows = _decisions(project, run_id)
    assert rows[-1]["status"] == "pending"
    assert rows[-1]["summary"]["show"]["draft"] == "edited \n"
    # back to the draft the revision was about: the revision holds again
    project.write("pipeline.yaml", GATED)
    again = project.apply()
    assert again["_exit"] == 7
    assert (project.root / "out/draft.txt").read_text() == "draft reviewer feedback: shorter\n"


def test_a_revision_of_other_inputs_is_not_part_of_the_next_review(project: Project) -> None:
    """Revise, change the draft's inputs, revise the new draft: the draft is made with the
    second review only, as from scratch (it was made with both; found by the oracle)."""
    run_id = _suspended(project)["run"]["id"]
    _decide(project, run_id, "revise", "--input", "feedback=warmer")
    project.write("pipeline.yaml", GATED.replace("'draft ", "'edited "))
    assert project.apply()["_exit"] == 7  # asks about the new, unrevised draft
    assert (project.root / "out/draft.txt").read_text() == "edited \n"
    _decide(project, run_id, "revise", "--input", "feedback=shorter")
    doc = project.apply()
    assert doc["_exit"] == 7
    text = (project.root / "out/draft.txt").read_text()
    assert text == "edited reviewer feedback: shorter\n", text
    plan = project.cli("plan", "pipeline.yaml", "--json", "--state", ".runner").json
    assert {s["id"]: s["action"] for s in plan["steps"]}["draft"] == "cached", plan
