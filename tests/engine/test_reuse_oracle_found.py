"""Plain regression tests of what the differential oracle (test_reuse_oracle.py) found: each
sequence it failed on, as the few commands that show it."""

from __future__ import annotations

from typing import Any

from tests.conftest import Project
from tests.oracle_drive import WatchDriver

GATED = """\
    runner: 1
    name: g
    steps:
      draft:
        uses: template
        with: {text: "a draft"}
      review:
        uses: human_gate
        with: {summary: "ok?", show: {draft: "${{ steps.draft.output.text }}"}}
      publish:
        uses: shell
        needs: [review]
        with: {run: "mkdir -p out && echo done > out/p.txt", outputs: [out/p.txt]}
"""

EDITED = """\
    runner: 1
    name: e
    params:
      shots: {type: array, default: [a, b]}
    steps:
      shot:
        uses: template
        for_each: "${{ params.shots }}"
        with: {text: "shot {{ s }}", vars: {s: "${{ item }}"}}
"""


def _actions(project: Project, *params: str) -> dict[tuple[str, int | None], tuple[str, Any]]:
    doc = project.cli("plan", "pipeline.yaml", "--json", *params).json
    out: dict[tuple[str, int | None], tuple[str, Any]] = {}
    for s in doc["steps"]:
        for el in s.get("elements") or []:
            out[(s["id"], el["index"])] = (el["action"], el["reasons"])
        if not s.get("elements"):
            out[(s["id"], None)] = (s["action"], s["reasons"])
    return out


def test_plan_sees_a_decision_recorded_without_resuming(project: Project) -> None:
    """`decide --no-resume` records the decision; the next apply takes it and goes on past the
    gate. plan said `ask` ("would ask for a decision") for that apply."""
    project.write("pipeline.yaml", GATED)
    run_id = project.apply()["run"]["id"]
    assert project.cli("decide", "--no-resume", run_id, "review", "approve").exit_code == 0
    review, _ = _actions(project)[("review", None)]
    assert review == "run"
    doc = project.apply()
    assert doc["_exit"] == 0 and {s["id"]: s["status"] for s in doc["steps"]}["review"] == "ran"


def test_plan_sees_a_rejection_recorded_without_resuming(project: Project) -> None:
    project.write("pipeline.yaml", GATED)
    run_id = project.apply()["run"]["id"]
    assert project.cli("decide", "--no-resume", run_id, "review", "reject").exit_code == 0
    review, why = _actions(project)[("review", None)]
    assert review == "cached" and "rejected" in why[0]
    assert project.apply()["_exit"] == 8


def test_plan_of_an_edit_set_aside_answers_from_the_cache(project: Project) -> None:
    """A `runner edit` of element 0 is set aside when that element's key changes; the apply then
    answers it from the cache when the new key has a result. plan said `run`."""
    project.write("pipeline.yaml", EDITED)
    assert project.apply("-p", 'shots=["b"]')["_exit"] == 0  # "shot b" is now cached
    run_id = project.apply()["run"]["id"]
    fixed = project.write("fixed.txt", "my shot")
    res = project.cli("edit", run_id, "shot", "--element", "0", "--from", str(fixed))
    assert res.exit_code == 0, res.stderr
    action, why = _actions(project, "-p", 'shots=["b"]')[("shot", 0)]
    assert action == "cached", why
    assert "set aside" in why[0]
    doc = project.apply("-p", 'shots=["b"]')
    assert doc["_exit"] == 0 and doc["summary"]["ran"] == 0, doc


REVISED = """\
    runner: 1
    name: r
    steps:
      draft:
        uses: llm
        with: {prompt: "write a draft"}
        check: ["${{ output.text | length > 0 }}"]
      review:
        uses: human_gate
        with: {summary: "ok?", show: {draft: "${{ steps.draft.output.text }}"}, revise: draft}
"""


def test_plan_sees_a_revision_recorded_without_resuming(project: Project) -> None:
    """`decide --no-resume ... revise` records the revision; the next apply continues that run
    and drafts again with the review. plan said the draft was `cached`."""
    project.write("pipeline.yaml", REVISED)
    run_id = project.apply()["run"]["id"]
    res = project.cli(
        "decide", "--no-resume", run_id, "review", "revise", "--input", "feedback=shorter"
    )
    assert res.exit_code == 0, res.stderr
    draft, _ = _actions(project)[("draft", None)]
    assert draft == "run"
    doc = project.apply()
    assert {s["id"]: s["status"] for s in doc["steps"]}["draft"] == "ran", doc


ITEMS = """\
    runner: 1
    name: items
    params:
      topic: {type: string, default: cats}
    item: "${{ params.topic }}"
    steps:
      make:
        uses: template
        with: {text: "about {{ t }}", vars: {t: "${{ params.topic }}"}}
"""


def test_verify_names_the_item_whose_apply_clears_a_dead_run(project: Project) -> None:
    """A run left `running` by a killed apply is marked interrupted only by the next apply of
    its pipeline *and item* (under the item's lock). verify said "the next apply of its
    pipeline", and the oracle's next apply (of another item) left it."""
    import sqlite3

    project.write("pipeline.yaml", ITEMS)
    doc = project.apply("-p", "topic=cats")
    db = sqlite3.connect(project.root / ".runner/journal.db")
    db.execute("UPDATE runs SET status='running', pid=? WHERE id=?", (2**22 + 7, doc["run"]["id"]))
    db.commit()
    db.close()
    project.apply("-p", "topic=dogs")  # another item: not its to mark
    problems = project.cli("verify", "--state", ".runner", "--json").json["problems"]
    assert len(problems) == 1 and "pipeline 'items' item 'cats'" in problems[0], problems
    project.apply("-p", "topic=cats")
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True


DRAFTED = """\
    runner: 1
    name: d
    params:
      text: {type: string, default: one}
    steps:
      write:
        uses: shell
        with: {run: "mkdir -p out && echo ${{ params.text }} > out/d.txt", outputs: [out/d.txt]}
      review:
        uses: human_gate
        needs: [write]
        with: {summary: "ok?"}
"""


def test_verify_does_not_take_a_newer_runs_output_for_a_hand_edit(project: Project) -> None:
    """A run waiting at its gate rewrote an output the last completed run recorded: verify
    compared the file with the completed run's record and said it was edited by hand."""
    project.write("pipeline.yaml", DRAFTED)
    run_id = project.apply()["run"]["id"]
    assert project.cli("decide", "--no-resume", run_id, "review", "approve").exit_code == 0
    assert project.apply()["_exit"] == 0  # completed: out/d.txt holds "one"
    assert project.apply("-p", "text=two")["_exit"] == 7  # rewrote it, waits at the gate
    res = project.cli("verify", "--state", ".runner", "--json")
    assert res.json["ok"] is True, res.json["problems"]
    (project.root / "out/d.txt").write_text("by hand\n")  # a real hand edit is still named
    problems = project.cli("verify", "--state", ".runner", "--json").json["problems"]
    assert any("out/d.txt" in p and "edited by hand" in p for p in problems), problems


WATCHED = """\
    runner: 1
    name: w
    steps:
      a:
        uses: template
        with: {text: "A"}
      out:
        uses: shell
        with:
          run: 'mkdir -p out && printf "%s" "$A" > out/a.txt'
          env: {A: "${{ steps.a.output.text }}"}
          outputs: [out/a.txt]
      d:
        uses: read
        with: {path: data/in.txt}
"""


def _watch(project: Project) -> WatchDriver:
    """`runner watch` on the project, its first cycle run."""
    w = WatchDriver(project.root / "pipeline.yaml", project.root / ".runner", {})
    assert w.cycle([])[0] == 0
    return w


def _cycle(w: WatchDriver) -> int:
    changed = w.changes()
    assert changed
    return w.cycle(changed)[0]


def test_a_watch_cycle_uses_a_runner_edit_made_since_the_last(project: Project) -> None:
    """A watch cycle answered the steps a change does not reach from its last cycle: a `runner
    edit` made in between was ignored (a fresh apply uses it)."""
    project.write("pipeline.yaml", WATCHED)
    project.write("data/in.txt", "one")
    w = _watch(project)
    try:
        run_id = w.cycles[-1].report.run_id
        fixed = project.write("fixed.txt", "edited A")
        assert project.cli("edit", run_id, "a", "--from", str(fixed)).exit_code == 0
        project.write("data/in.txt", "two")
        assert _cycle(w) == 0
        assert (project.root / "out/a.txt").read_text() == "edited A"
    finally:
        w.close()


def test_a_watch_cycle_restores_an_output_deleted_since_the_last(project: Project) -> None:
    project.write("pipeline.yaml", WATCHED)
    project.write("data/in.txt", "one")
    w = _watch(project)
    try:
        (project.root / "out/a.txt").unlink()
        project.write("data/in.txt", "two")
        assert _cycle(w) == 0
        assert (project.root / "out/a.txt").read_text() == "A"
        assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True
    finally:
        w.close()


def test_runner_edit_back_to_what_the_run_used_supersedes_the_standing_edit(
    project: Project,
) -> None:
    """Edit to X, apply (the run uses X), edit to Y, then edit back to X: runner edit compared
    X with the run's output (X), said unchanged and left Y in force."""
    project.write("pipeline.yaml", EDITED)
    run_id = project.apply()["run"]["id"]
    x, y = project.write("x.txt", "shot X"), project.write("y.txt", "shot Y")

    def edit(src: Any, rid: str) -> Any:
        res = project.cli("edit", rid, "shot", "--element", "0", "--from", str(src), "--json")
        assert res.exit_code == 0, res.stderr
        return res.json

    edit(x, run_id)
    used_x = project.apply()["run"]["id"]
    edit(y, used_x)
    assert edit(x, used_x)["changed"] is True
    project.apply()
    runs = project.cli("runs", "show", project.apply()["run"]["id"], "--json").json
    shot0 = [e for e in runs["executions"] if e["step_id"] == "shot" and e["element"] == 0]
    assert shot0[-1]["output"]["text"] == "shot X", shot0


READ_GATE = """\
    runner: 1
    name: rg
    steps:
      notes:
        uses: read
        with: {path: data/in.txt}
      review:
        uses: human_gate
        with: {summary: "ok?", show: {notes: "${{ steps.notes.output.text }}"}}
"""


def test_an_approval_holds_when_its_inputs_come_back_in_the_same_run(project: Project) -> None:
    """Approve what the gate showed, change the input (the run asks again), change it back: the
    run asked a third time about what was approved in its first round (an approval of another
    run on the same inputs is remembered; one of an earlier round of this run was not)."""
    project.write("pipeline.yaml", READ_GATE)
    project.write("data/in.txt", "one")
    run_id = project.apply()["run"]["id"]
    assert project.cli("decide", "--no-resume", run_id, "review", "approve").exit_code == 0
    project.write("data/in.txt", "two")
    assert project.apply()["_exit"] == 7
    project.write("data/in.txt", "one")
    review, why = _actions(project)[("review", None)]
    assert review == "run" and "approved" in why[0], why
    doc = project.apply()
    assert doc["_exit"] == 0 and doc["run"]["id"] == run_id, doc


REVISED_WRITE = """\
    runner: 1
    name: rw
    steps:
      draft:
        uses: llm
        with: {prompt: "write a draft"}
        check: ["${{ output.text | length > 0 }}"]
      write:
        uses: shell
        with:
          run: 'mkdir -p out && printf "%s" "$D" > out/d.md'
          env: {D: "${{ steps.draft.output.text }}"}
          outputs: [out/d.md]
      review:
        uses: human_gate
        with: {summary: "ok?", show: {draft: "${{ steps.draft.output.text }}"}, revise: draft}
"""


def test_a_remembered_revision_takes_no_output_for_a_hand_edit(project: Project) -> None:
    project.write("pipeline.yaml", REVISED_WRITE)
    run_id = project.apply()["run"]["id"]
    res = project.cli("decide", run_id, "review", "revise", "--input", "feedback=shorter")
    assert res.exit_code == 7, res.stderr
    assert project.cli("decide", run_id, "review", "approve").exit_code == 0
    events = project.root / "events.jsonl"
    doc = project.apply("--events", str(events))
    assert doc["_exit"] == 0, doc
    edited = [line for line in events.read_text().splitlines() if '"OutputEdited"' in line]
    assert edited == []


def test_a_second_revision_takes_no_output_for_a_hand_edit(project: Project) -> None:
    """apply; decide revise (resumes: drafts again, asks); apply; decide revise again; apply:
    the last apply restored out/d.md over the revised draft's output as an 'edited by hand' file
    (found by the differential oracle, soak batch of 00:02)."""
    project.write("pipeline.yaml", REVISED_WRITE)
    run_id = project.apply()["run"]["id"]
    for feedback in ("warmer", "shorter"):
        res = project.cli("decide", run_id, "review", "revise", "--input", f"feedback={feedback}")
        assert res.exit_code == 7, res.stderr
        if feedback == "warmer":
            assert project.apply()["_exit"] == 7
    events = project.root / "events.jsonl"
    assert project.apply("--events", str(events))["_exit"] == 7
    edited = [line for line in events.read_text().splitlines() if '"OutputEdited"' in line]
    assert edited == []
