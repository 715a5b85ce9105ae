"""`plan` and `apply --dry-run` take every flag of `apply` that changes what runs, and say what
that apply would do (issue 44): the plan of `apply --reask GATE` asks, the plan of `apply
--retry-uncertain` starts again a body never seen to end."""

from __future__ import annotations

import json

import click

from runner.surfaces.cli.app import cli
from tests.conftest import Project, statuses
from tests.engine.test_gate import GATED

# apply's options that change how or where a run is done, or what it prints, not what runs
NOT_WHAT_RUNS = {
    "dry_run",
    "jobs",
    "events_file",
    "out_dir",
    "quiet",
    "executor",
    "scheduler",
    "workers",
    "threads",
    "state_dir",
    "as_json",
    # where a result comes from, not whether it is made: plan never asks the remote (its
    # estimate is an upper bound; docs/team-cache.md)
    "remote",
}


def _options(name: str) -> set[str]:
    assert isinstance(cli, click.Group)
    command = cli.commands[name]
    return {p.name for p in command.params if isinstance(p, click.Option) and p.name}


def test_plan_takes_every_flag_of_apply_that_changes_what_runs() -> None:
    missing = _options("apply") - NOT_WHAT_RUNS - _options("plan")
    assert not missing, f"apply flags plan does not take: {sorted(missing)}"
    # explain is plan's per-step view: the same flags but the budget's (it prices nothing)
    missing = _options("apply") - NOT_WHAT_RUNS - {"max_cost"} - _options("explain")
    assert not missing, f"apply flags explain does not take: {sorted(missing)}"


def _actions(doc: dict[str, object]) -> dict[str, str]:
    steps = doc["steps"]
    assert isinstance(steps, list)
    return {s["id"]: s["action"] for s in steps}


def test_the_plan_of_a_reask_asks(project: Project) -> None:
    project.write("pipeline.yaml", GATED)
    first = project.apply()
    res = project.cli("decide", "--no-resume", first["run"]["id"], "review", "approve")
    assert res.exit_code == 0, res.stderr
    assert project.apply()["_exit"] == 0
    for command in (["plan"], ["apply", "--dry-run"]):
        plain = project.cli(*command, "pipeline.yaml", "--json").json
        assert _actions(plain)["review"] == "cached", plain
        asked = project.cli(*command, "pipeline.yaml", "--json", "--reask", "review").json
        assert _actions(asked)["review"] == "ask", asked
        wrong = project.cli(*command, "pipeline.yaml", "--reask", "draft")
        assert wrong.exit_code == 2 and "not a human_gate" in wrong.stderr
    # and the apply does what its plan said
    assert statuses(project.apply("--reask", "review"))["review"] == "awaiting_human"


ONCE = """\
    runner: 1
    name: once
    steps:
      send:
        uses: shell
        repeat_safe: false
        with: {run: "echo sent >> sent.log", outputs: [sent.log]}
"""


def test_the_plan_of_retry_uncertain_starts_a_lost_body_again(project: Project) -> None:
    project.write("pipeline.yaml", ONCE)
    doc = project.cli("plan", "pipeline.yaml", "--json").json
    [step] = doc["steps"]
    # a body that began and was never seen to end leaves its mark (engine/run/once.py): as a
    # killed apply does, by the mark's own writer
    from runner.engine.run import once

    once.claim(str(once.mark_path(project.root / ".runner", step["key"])), "r1", "send", None)
    for command in (["plan"], ["apply", "--dry-run"]):
        plain = project.cli(*command, "pipeline.yaml", "--json").json
        [said] = plain["steps"]
        assert "would fail it without running" in json.dumps(said["reasons"]), said
        again = project.cli(*command, "pipeline.yaml", "--json", "--retry-uncertain").json
        [said] = again["steps"]
        assert "runs again (--retry-uncertain)" in json.dumps(said["reasons"]), said
    refused = project.apply()
    assert statuses(refused)["send"] == "failed", refused
    assert not (project.root / "sent.log").exists()
    sent = project.apply("--retry-uncertain")
    assert statuses(sent)["send"] == "ran", sent
    assert (project.root / "sent.log").read_text() == "sent\n"
