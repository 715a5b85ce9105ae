"""The scheduler (engine/run/scheduler.py) over a real compiled plan: dependency order, a stop that
starts nothing more, why a step is blocked, the --jobs slots, and a cancel from elsewhere."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from runner.engine.run.apply import State, apply_plan
from runner.engine.run.options import ApplyOptions
from runner.engine.run.outcomes import StepOutcome, StepStatus
from runner.engine.run.scheduler import Scheduler
from runner.expr.shellrun import run_shell
from runner.pipeline.compiler import CompiledStep, Plan, compile_pipeline

PIPELINE = """\
runner: 1
name: sched
steps:
  a:
    uses: hash
    with: {value: 1}
  b:
    uses: hash
    with: {value: "${{ steps.a.output.short }}"}
  c:
    uses: hash
    with: {value: 2}
  d:
    uses: hash
    with: {value: ["${{ steps.b.output.short }}", "${{ steps.c.output.short }}"]}
"""


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(PIPELINE), encoding="utf-8")
    plan = compile_pipeline(path)
    assert plan.steps["d"].deps and set(plan.steps["d"].deps) == {"b", "c"}
    return plan


def test_a_step_starts_once_every_dependency_has_its_outcome(plan: Plan) -> None:
    scheduler = Scheduler(plan, jobs=2)
    seen: dict[str, set[str]] = {}

    async def run_step(step: CompiledStep) -> StepOutcome:
        seen[step.id] = set(scheduler.outcomes)
        await asyncio.sleep(0)
        return StepOutcome(step.id, StepStatus.RAN)

    settled: list[int] = []
    asyncio.run(scheduler.run(run_step, stopped=lambda: False, settle=lambda: settled.append(1)))
    assert set(seen) == {"a", "b", "c", "d"}
    for sid, before in seen.items():
        assert set(plan.steps[sid].deps) <= before, sid
    assert {s: o.status for s, o in scheduler.outcomes.items()} == dict.fromkeys(
        "abcd", StepStatus.RAN
    )
    assert settled  # the recorder's deferred writes get their turn


def test_once_stopped_no_new_step_starts(plan: Plan) -> None:
    scheduler = Scheduler(plan, jobs=2)
    stop = False

    async def run_step(step: CompiledStep) -> StepOutcome:
        nonlocal stop
        if step.id == "a":
            stop = True  # a run limit was reached while 'a' ran
        return StepOutcome(step.id, StepStatus.RAN)

    asyncio.run(scheduler.run(run_step, stopped=lambda: stop, settle=lambda: None))
    assert set(scheduler.outcomes) == {"a", "c"}  # the roots started before the stop


@pytest.mark.parametrize(
    ("upstream", "reason"),
    [
        (StepStatus.FAILED, "upstream 'a' failed"),
        (StepStatus.AWAITING_HUMAN, "waiting for the decision at 'a'"),
        (StepStatus.REJECTED, "rejected at 'a'"),
        (StepStatus.SKIPPED, "upstream 'a' was skipped"),
        (StepStatus.PARTIAL, "upstream 'a' is partial"),
        (StepStatus.CACHED, None),
        (StepStatus.RAN, None),
    ],
)
def test_why_a_step_is_blocked(plan: Plan, upstream: StepStatus, reason: str | None) -> None:
    scheduler = Scheduler(plan, jobs=1)
    scheduler.outcomes["a"] = StepOutcome("a", upstream)
    assert scheduler.blocked(plan.steps["b"]) == reason


def test_no_more_executions_hold_a_slot_than_jobs(plan: Plan) -> None:
    scheduler = Scheduler(plan, jobs=2)
    inside = 0
    most = 0

    async def execution() -> None:
        nonlocal inside, most
        async with scheduler.slot():
            inside += 1
            most = max(most, inside)
            for _ in range(5):
                await asyncio.sleep(0)
            inside -= 1

    async def main() -> None:
        await asyncio.gather(*(execution() for _ in range(8)))

    asyncio.run(main())
    assert most == 2


def test_a_command_gives_its_slot_to_the_next_one_when_its_process_exits(
    plan: Plan, tmp_path: Path
) -> None:
    """With one slot: the second execution's command starts while the first execution is
    still busy after its own command (storing, journaling), not once it is done; a command
    run after that by the first (a retry, a check) waits for a slot like any other."""
    scheduler = Scheduler(plan, jobs=1)
    events: list[str] = []

    async def execution(name: str, commands: int) -> None:
        async with scheduler.slot():
            for n in range(commands):
                await run_shell(f"echo {name}{n}", cwd=tmp_path)
                events.append(f"{name}{n} exited")
                await asyncio.sleep(0.05)  # the work after a command
                events.append(f"{name}{n} stored")

    async def main() -> None:
        await asyncio.gather(execution("a", 2), execution("b", 1))

    asyncio.run(main())
    assert events == [
        "a0 exited",  # a's slot goes to b's command, which runs while a stores
        "b0 exited",
        "a0 stored",
        "b0 stored",
        "a1 exited",  # a's second command waited for b to give the slot back
        "a1 stored",
    ], events


def test_no_more_commands_run_at_once_than_jobs(tmp_path: Path) -> None:
    """Real processes: each command notes when it started and ended; however the slots are
    handed over, never more than --jobs overlap, a check's command and a retry's included."""
    # The spans are the test's instrument, noted outside the project: a check may write no file
    # of the project (the sandbox), and the temporary directories are writable to any command.
    t, root = tmp_path / "t", tmp_path / "project"
    span = f"s=$(date +%s.%N); sleep 0.1; echo $s $(date +%s.%N) >> {t}/{{}}.spans"
    again = f"test -e {t}/again || (touch {t}/again; false)"
    steps = (  # first, so its check and its retry run beside the others
        f"\n  s0:\n    uses: shell\n    retries: 1\n    with: {{run: '{span.format(0)}'}}\n"
        f"    check: [{{exec: {{run: '{span.format('check')}; {again}'}}}}]\n"
    )
    steps += "".join(
        f"\n  s{i}:\n    uses: shell\n    with: {{run: '{span.format(i)}'}}\n" for i in range(1, 9)
    )
    t.mkdir()
    root.mkdir()
    (root / "pipeline.yaml").write_text("runner: 1\nname: lanes\nsteps:" + steps)
    plan = compile_pipeline(root / "pipeline.yaml")
    state = State.open(root / ".runner")
    try:
        report = apply_plan(plan, state, ApplyOptions(jobs=2))
    finally:
        state.close()
    assert report.status.value == "completed", [(s.id, s.status, s.reason) for s in report.steps]
    spans = [
        (float(start), float(end))
        for f in t.glob("*.spans")
        for start, end in (line.split() for line in f.read_text().splitlines())
    ]
    assert len(spans) == 8 + 2 + 2  # s0 and its check ran twice
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2, sorted(spans)


def test_a_cancel_asked_from_elsewhere_cancels_the_run(plan: Plan) -> None:
    scheduler = Scheduler(plan, jobs=1)
    asked = [False, True]

    async def forever() -> None:
        await asyncio.Event().wait()

    async def main() -> bool:
        run = asyncio.create_task(forever())
        await scheduler.watch_cancel(run, lambda: asked.pop(0))
        with pytest.raises(asyncio.CancelledError):
            await run
        return run.cancelled()

    assert asyncio.run(main())
    assert scheduler.cancel_requested


def _trace(plan: Plan, answerable: set[str] | None) -> list[str]:
    """What a run does, in order: each step's run (or answer) and each settle."""
    scheduler = Scheduler(plan, jobs=2)
    trace: list[str] = []

    async def run_step(step: CompiledStep) -> StepOutcome:
        assert set(plan.steps[step.id].deps) <= set(scheduler.outcomes)
        trace.append(step.id)
        if answerable is not None and step.id not in answerable:
            await asyncio.sleep(0.01)  # a body to wait for
        return StepOutcome(step.id, StepStatus.CACHED)

    def now(step: CompiledStep) -> StepOutcome | None:
        if answerable is None or step.id not in answerable:
            return None
        assert set(plan.steps[step.id].deps) <= set(scheduler.outcomes)
        trace.append(step.id)
        return StepOutcome(step.id, StepStatus.CACHED)

    settle = lambda: trace.append("settle")  # noqa: E731
    asyncio.run(scheduler.run(run_step, stopped=lambda: False, settle=settle, now=now))
    assert set(scheduler.outcomes) == set(plan.order)
    return trace


def test_steps_answered_at_once_go_as_their_tasks_would(plan: Plan) -> None:
    # Every step answered without a task: the same steps in the same order, settled in the
    # same batches, as when each is a task that finishes without waiting.
    assert _trace(plan, set(plan.order)) == _trace(plan, None)
    # Some steps wait on a body: every step still runs once, after its dependencies.
    for waiting in ("a", "b", "c", "d"):
        trace = _trace(plan, set(plan.order) - {waiting})
        assert sorted(s for s in trace if s != "settle") == sorted(plan.order)
