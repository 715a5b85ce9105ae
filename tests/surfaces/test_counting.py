"""One counting vocabulary (issue 42): plan, apply, a no-op apply, resume, watch and cancel count
the same things in the same words: steps, a for_each step by its elements (surfaces/counts.py).
What a plan says it would run is what the apply then says it ran."""

from __future__ import annotations

import subprocess

from runner.engine.run.apply import apply_file
from runner.surfaces.watch import work_counts
from tests.conftest import Project, runner_bin
from tests.engine.test_fastpath import age_files

PIPELINE = """\
    runner: 1
    name: counted
    params:
      word: {type: string, default: hi}
    steps:
      first:
        uses: shell
        with: {run: "echo first"}
      each:
        uses: template
        for_each: "${{ ['a', 'b', 'c'] }}"
        with: {text: "${{ item }} ${{ params.word }}"}
      last:
        uses: template
        with: {text: "last"}
"""

GATED = PIPELINE.replace(
    """      last:
        uses: template
        with: {text: "last"}
""",
    """      ask:
        uses: human_gate
        needs: [each, first]
        with: {summary: "ok?"}
""",
)


def _line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


def test_plan_and_apply_count_alike(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    plan = project.cli("plan", "pipeline.yaml")
    assert _line(plan.stdout, "plan: ") == "plan: run 2 steps and 3 elements"
    applied = project.cli("apply", "pipeline.yaml", "-q")
    assert applied.stdout.startswith("completed: ran 2 steps and 3 elements  (run ")
    # one element's arguments change: the plan and the apply say the same
    plan = project.cli("plan", "pipeline.yaml", "-p", "word=yo")
    assert _line(plan.stdout, "plan: ") == "plan: run 3 elements, cached 2 steps"
    applied = project.cli("apply", "pipeline.yaml", "-q", "-p", "word=yo")
    assert applied.stdout.startswith("completed: ran 3 elements, cached 2 steps  (run ")
    plan = project.cli("plan", "pipeline.yaml", "-p", "word=yo")
    assert _line(plan.stdout, "plan: ") == "plan: cached 2 steps and 3 elements"
    noop = project.cli("apply", "pipeline.yaml", "-p", "word=yo")
    assert noop.stdout.startswith("completed: cached 2 steps and 3 elements  (run ")
    assert noop.stdout.rstrip().endswith("; nothing changed)")


def test_the_quick_no_op_counts_alike(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    for _ in range(2):  # the second apply records the fingerprint of aged files
        assert project.cli("apply", "pipeline.yaml", "-q").exit_code == 0
        age_files(project.root)
    quick = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml"],
        cwd=project.root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert quick.returncode == 0, quick.stderr
    assert quick.stdout.startswith("completed: cached 2 steps and 3 elements  (run ")
    assert quick.stdout.rstrip().endswith("; nothing changed)")


def test_a_watch_cycle_counts_alike(project: Project) -> None:
    path = project.write("pipeline.yaml", PIPELINE)
    state = project.root / ".runner"
    assert work_counts(apply_file(path, state_dir=state)) == "ran 2 steps and 3 elements"
    again = apply_file(path, {"word": '"yo"'}, state_dir=state)
    assert work_counts(again) == "ran 3 elements, cached 2 steps"


def test_cancel_says_what_the_run_keeps_alike(project: Project) -> None:
    project.write("pipeline.yaml", GATED)
    doc = project.apply()
    assert doc["_exit"] == 7
    run_id = doc["run"]["id"]
    res = project.cli("runs", "cancel", run_id)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == (
        f"run {run_id}: cancelled; kept 1 step and 3 elements done "
        f"(runner resume {run_id} goes on from there)\n"
    )
    second = project.apply()
    res = project.cli("runs", "cancel", second["run"]["id"], "--json")
    assert res.json["kept"] == {"steps": 1, "elements": 3}
