"""The console's phase headers: each line under its own phase, phases in pipeline order, a header
once and never for a phase with nothing to say (all cached).

The reporters are fed the engine's event sequence directly (what a run with independent steps
in two phases emits) and, end to end, a real apply in a subprocess with --jobs 2.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run.events import Event, EventType
from runner.pipeline.compiler import compile_pipeline
from runner.surfaces.cli.console import LiveReporter, PlainReporter
from tests.conftest import Project, runner_bin

# `late` (phase two) needs nothing: with two jobs it starts, and ends, while `slow` (phase one)
# still runs. `each` is a for_each in phase one.
PIPELINE = """\
runner: 1
name: phased
phases: [one, two]
steps:
  slow:
    uses: shell
    phase: one
    with: {run: "sleep 1; echo slow"}
  each:
    uses: template
    phase: one
    for_each: [1, 2]
    with: {text: "item ${{ item }}"}
  late:
    uses: shell
    phase: two
    with: {run: "echo late"}
"""


@pytest.fixture
def plan(project: Project) -> Any:
    return compile_pipeline(project.write("pipeline.yaml", PIPELINE), {})


def ev(kind: EventType, step: str | None = None, element: int | None = None, **data: Any) -> Event:
    return Event(kind, "r1", step, element, data)


# What the engine emits when `late` runs ahead of phase one.
INTERLEAVED = [
    ev(EventType.RUN_STARTED, pipeline="phased", steps=3),
    ev(EventType.PHASE_ENTERED, phase="one"),
    ev(EventType.STEP_STARTED, "slow"),
    ev(EventType.PHASE_ENTERED, phase="two"),
    ev(EventType.STEP_STARTED, "late"),
    ev(EventType.STEP_PASSED, "late", duration_s=0.01),
    ev(EventType.PHASE_ENTERED, phase="one"),
    ev(EventType.STEP_STARTED, "each", 0),
    ev(EventType.STEP_PASSED, "each", 0, duration_s=0.01),
    ev(EventType.STEP_STARTED, "each", 1),
    ev(EventType.STEP_FAILED, "each", 1, reason="boom"),
    ev(EventType.FOR_EACH_ENDED, "each", status="partial", elements=2),
    ev(EventType.STEP_PASSED, "slow", duration_s=1.0),
    ev(EventType.RUN_FINISHED, status="partial", duration_s=1.0),
]


def lines(text: str) -> list[str]:
    return [line.split(" (")[0].rstrip() for line in text.splitlines()]


def test_lines_go_under_their_phase_in_pipeline_order(plan: Any) -> None:
    out = io.StringIO()
    reporter = PlainReporter(out, plan=plan)
    for i, event in enumerate(INTERLEAVED):
        reporter.event(event)
        if event.step_id == "late" and event.type is EventType.STEP_PASSED:
            assert "late" not in out.getvalue()  # held: phase one has not ended
        if i == len(INTERLEAVED) - 2:
            assert lines(out.getvalue())[-1] == "  ran     late"  # released when `slow` ended
    assert lines(out.getvalue()) == [
        "run r1: phased",
        "== phase one",
        "  ran     each[0]",
        "  FAILED  each[1]: boom",
        "  ran     slow",
        "== phase two",
        "  ran     late",
        "run r1: partial in 1.00s",
    ]


def test_no_header_for_a_phase_all_cached(plan: Any) -> None:
    out = io.StringIO()
    reporter = PlainReporter(out, plan=plan)
    for event in [
        ev(EventType.RUN_STARTED, pipeline="phased", steps=3),
        ev(EventType.PHASE_ENTERED, phase="one"),
        ev(EventType.STEP_SKIPPED, "slow", reason="cached"),
        ev(EventType.STEP_SKIPPED, "each", reason="cached"),
        ev(EventType.PHASE_ENTERED, phase="two"),
        ev(EventType.STEP_STARTED, "late"),
        ev(EventType.STEP_PASSED, "late", duration_s=0.01),
        ev(EventType.RUN_FINISHED, status="completed", duration_s=0.1),
    ]:
        reporter.event(event)
    assert lines(out.getvalue()) == [
        "run r1: phased",
        "== phase two",
        "  ran     late",
        "run r1: completed in 0.10s",
    ]


def test_a_run_that_stops_early_prints_what_it_held(plan: Any) -> None:
    out = io.StringIO()
    reporter = PlainReporter(out, plan=plan)
    for event in [*INTERLEAVED[:6], ev(EventType.RUN_FINISHED, status="cancelled")]:
        reporter.event(event)
    assert lines(out.getvalue())[1:] == [
        "== phase two",
        "  ran     late",
        "run r1: cancelled in 0.00s",
    ]


def test_the_live_view_orders_its_headers_too(plan: Any) -> None:
    out = io.StringIO()
    reporter = LiveReporter(3, out, plan=plan)
    for event in INTERLEAVED:
        reporter.event(event)
    reporter.close()
    printed = [line.strip() for line in out.getvalue().splitlines() if line.strip()]
    headers = [line for line in printed if line.startswith("== phase")]
    assert headers == ["== phase one", "== phase two"]
    assert printed.index("== phase one") < printed.index("FAILED each[1]: boom")
    assert printed.index("FAILED each[1]: boom") < printed.index("== phase two")


def test_a_real_apply_reads_in_pipeline_order(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    cmd = [*runner_bin(), "apply", "pipeline.yaml", "--jobs", "2", "--state", ".runner"]
    first = subprocess.run(cmd, cwd=project.root, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    got = lines(first.stderr)
    assert got.count("== phase one") == 1 and got.count("== phase two") == 1
    one, two = got.index("== phase one"), got.index("== phase two")
    assert one < got.index("  ran     slow") < two < got.index("  ran     late")
    assert one < got.index("  ran     each[1 2]") < two  # element 1, named by its item 2
    # everything cached: no phase has anything to say, so no header
    again = subprocess.run(
        [*cmd, "--force", "late"], cwd=project.root, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert "== phase one" not in again.stderr
    assert lines(again.stderr).count("== phase two") == 1


def test_without_a_plan_headers_follow_the_engine(tmp_path: Path) -> None:
    # a reporter given no plan: headers come from PhaseEntered, none when cached
    out = io.StringIO()
    reporter = PlainReporter(out)
    for event in [
        ev(EventType.PHASE_ENTERED, phase="one"),
        ev(EventType.STEP_SKIPPED, "slow", reason="cached"),
        ev(EventType.PHASE_ENTERED, phase="two"),
        ev(EventType.STEP_PASSED, "late", duration_s=0.01),
    ]:
        reporter.event(event)
    assert lines(out.getvalue()) == ["== phase two", "  ran     late"]


GATED = """\
runner: 1
name: gated
phases: [one, two]
steps:
  review:
    uses: human_gate
    phase: one
    with: {summary: "Go on?"}
  slow:
    uses: shell
    phase: one
    needs: [review]
    with: {run: "sleep 1; echo slow"}
  late:
    uses: shell
    phase: two
    needs: [review]
    with: {run: "echo late"}
"""


def test_decide_resumes_in_pipeline_order(project: Project) -> None:
    # After the decision both steps start at once; `late` (phase two) ends first, yet its line
    # waits under its own header until phase one has ended.
    project.write("pipeline.yaml", GATED)
    state = ("--state", ".runner")
    first = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--jobs", "2", *state, "--json"],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    run_id = json.loads(first.stdout)["run"]["id"]
    res = subprocess.run(
        [*runner_bin(), "decide", run_id, "review", "approve", "--by", "me", *state],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    got = lines(res.stderr)
    assert got.count("== phase one") == 1 and got.count("== phase two") == 1, got
    one, two = got.index("== phase one"), got.index("== phase two")
    assert one < got.index("  ran     slow") < two < got.index("  ran     late")
