"""What a run reports: step and element statuses, their outcomes, and the run's exit code.

Plain data shared by the scheduler, the recorder and the CLI; nothing here touches the journal.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

REJECTED_EXIT = 8  # a reviewer rejected the run: not an error, but nothing was committed
AWAITING_BATCH_EXIT = 11  # calls wait in a provider's batch: apply or resume collects them


class StepStatus(enum.Enum):
    RAN = "ran"
    CACHED = "cached"
    SKIPPED = "skipped"
    FAILED = "failed"
    PARTIAL = "partial"
    AWAITING_HUMAN = "awaiting_human"
    # calls wait in a provider's batch (batch mode): suspended as at a gate, collected later
    AWAITING_BATCH = "awaiting_batch"
    REJECTED = "rejected"  # a human_gate's decision: nothing downstream of it runs

    @property
    def succeeded(self) -> bool:
        return self in (StepStatus.RAN, StepStatus.CACHED)


class RunStatus(enum.Enum):
    RUNNING = "running"
    AWAITING_HUMAN = "awaiting_human"
    AWAITING_BATCH = "awaiting_batch"
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped by its surroundings, not by a step: the disk filled up, or its process died (the
    # next apply of its item finds it). Its finished work is recorded; an apply resumes it.
    INTERRUPTED = "interrupted"
    REJECTED = "rejected"


@dataclass(slots=True)  # one per element: a 100,000-element for_each holds them all
class ElementOutcome:
    """How one element of a for_each ended."""

    index: int
    status: StepStatus
    key: str | None = None
    output: Any = None
    reason: str | None = None
    check_failure: bool = False
    duration_s: float = 0.0


@dataclass
class StepOutcome:
    """How one step of a run ended (with its elements', for a for_each)."""

    id: str
    status: StepStatus
    key: str | None = None
    output: Any = None
    reason: str | None = None
    duration_s: float = 0.0
    attempts: int = 0
    check_failure: bool = False
    elements: list[ElementOutcome] | None = None
    report: Any = None
    # Files (relative to the root) the step's key covered: watch re-runs a step when one changes.
    reads: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "key": self.key,
            "duration_s": round(self.duration_s, 6),
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.elements is not None:
            counts: dict[str, int] = {}
            for e in self.elements:
                counts[e.status.value] = counts.get(e.status.value, 0) + 1
            doc["elements"] = {"total": len(self.elements), **counts}
        if self.report is not None:
            doc["report"] = self.report
        return doc


@dataclass
class RunReport:
    """How a run ended: its status and every step's outcome."""

    run_id: str
    pipeline: str
    status: RunStatus
    item: str | None
    steps: list[StepOutcome]
    exit_code: int
    reason: str | None = None
    # What this run depended on, for the no-op fast path (engine/plan/fastpath.py): input files with
    # their stat signatures, workspace files that must exist, objects that must be present.
    inputs: dict[str, tuple[int, int, int, int, str]] = field(default_factory=dict)
    workspace: dict[str, str] = field(default_factory=dict)
    objects: set[str] = field(default_factory=set)
    remote: dict[str, Any] | None = None  # the remote cache's hits, pushes and requests
    started_ns: int = 0  # when the run began (0: unknown), to tell the files it may have written
    # object -> its stat signature when this process last verified or wrote it
    verified: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    reads: dict[str, list[str]] = field(default_factory=dict)  # read step -> the files it read
    labels: dict[str, dict[int, str]] = field(default_factory=dict)  # for_each step -> names

    def summary(self) -> dict[str, int]:
        s = {"ran": 0, "cached": 0, "skipped": 0, "failed": 0}
        for o in self.steps:
            if o.status.value in s:
                s[o.status.value] += 1
            elif o.status is StepStatus.PARTIAL:
                s["failed"] += 0
        return s

    def to_json(self) -> dict[str, Any]:
        return {
            "run": {
                "id": self.run_id,
                "pipeline": self.pipeline,
                "status": self.status.value,
                "item": self.item,
                **({"reason": self.reason} if self.reason else {}),
            },
            "summary": self.summary(),
            "steps": [o.to_json() for o in self.steps],
            **({"remote": self.remote} if self.remote is not None else {}),
            "exit_code": self.exit_code,
        }


def run_status(steps: list[StepOutcome], *, aborted: bool = False) -> tuple[RunStatus, int]:
    """The run's status and exit code from its steps (design/overview.md, exit codes).

    A rejected gate ends the run ``rejected`` with exit 8 (REJECTED_EXIT): not a failure, but
    not a success either, so `runner apply ... && upload` never uploads a rejected draft.
    """
    if any(s.status is StepStatus.REJECTED for s in steps):
        return RunStatus.REJECTED, REJECTED_EXIT
    if any(s.status is StepStatus.AWAITING_HUMAN for s in steps):
        return RunStatus.AWAITING_HUMAN, 7
    if any(s.status is StepStatus.AWAITING_BATCH for s in steps):
        return RunStatus.AWAITING_BATCH, AWAITING_BATCH_EXIT
    failed = [s for s in steps if s.status is StepStatus.FAILED]
    partial = [s for s in steps if s.status is StepStatus.PARTIAL]
    succeeded = [s for s in steps if s.status.succeeded or s.status is StepStatus.PARTIAL]
    if aborted:
        return RunStatus.FAILED, 4 if not succeeded else 6
    if not failed and not partial:
        return RunStatus.COMPLETED, 0
    all_checks = (
        all(s.check_failure for s in failed)
        and all(
            s.check_failure
            or not s.elements
            or all(e.check_failure for e in s.elements if e.status is StepStatus.FAILED)
            for s in partial
        )
        and bool(
            failed
            or any(e.status is StepStatus.FAILED for s in partial for e in (s.elements or []))
        )
    )
    if failed and not succeeded:
        return RunStatus.FAILED, 5 if all_checks else 4
    return RunStatus.PARTIAL, 5 if all_checks else 6


def for_each_outcome(step_id: str, elements: list[ElementOutcome]) -> StepOutcome:
    """A for_each step's outcome from its elements': failed when none succeeded, partial when
    some failed, cached when all were."""
    failed = [e for e in elements if e.status is StepStatus.FAILED]
    ok = [e for e in elements if e.status.succeeded or e.status is StepStatus.PARTIAL]
    output = [e.output for e in elements if e.status.succeeded]
    waiting = [e for e in elements if e.status is StepStatus.AWAITING_BATCH]
    if waiting:  # the step is not over: its dependents wait for the batch as for a gate
        why = f"{len(waiting)} of {len(elements)} elements wait in a batch: {waiting[0].reason}"
        return StepOutcome(step_id, StepStatus.AWAITING_BATCH, None, output, why,
                           elements=elements)  # fmt: skip
    if failed and not ok:
        status = StepStatus.FAILED
    elif failed or any(e.status is StepStatus.PARTIAL for e in elements):
        status = StepStatus.PARTIAL
    elif elements and all(e.status is StepStatus.CACHED for e in elements):
        status = StepStatus.CACHED
    else:
        status = StepStatus.RAN
    reason = None
    if failed:
        reason = f"{len(failed)} of {len(elements)} elements failed: " + "; ".join(
            f"[{e.index}] {e.reason}" for e in failed[:3]
        )
    return StepOutcome(
        step_id,
        status,
        None,
        output,
        reason,
        elements=elements,
        check_failure=bool(failed) and all(e.check_failure for e in failed),
    )


def settle(
    plan: Any,
    journal: Any,
    run_id: str,
    steps: list[StepOutcome],
    status: RunStatus,
    exit_code: int,
) -> tuple[RunStatus, int]:
    """The run's status and exit code after the step types that decide how a run ends (an
    image run: by its iterations, see ImageStep.settle_run) have had their say. Called before
    the end is journaled and emitted, so every record tells one status."""
    outputs = {o.id: o.output for o in steps}
    for step_type in {type(s.type): s.type for s in plan.steps.values()}.values():
        settled = step_type.settle_run(
            journal=journal,
            run_id=run_id,
            plan=plan,
            outputs=outputs,
            status=status.value,
            exit_code=exit_code,
        )
        if settled is not None:
            status, exit_code = RunStatus(settled[0]), settled[1]
    return status, exit_code


def as_cached(outcome: StepOutcome) -> StepOutcome:
    """A previous cycle's outcome, reported as cached this time."""
    elements = None
    if outcome.elements is not None:
        elements = [
            dataclasses.replace(e, status=StepStatus.CACHED) if e.status is StepStatus.RAN else e
            for e in outcome.elements
        ]
    # A copy with three fields set: dataclasses.replace (~5 µs), then copy.copy (~2 µs) ran
    # for each of a watch cycle's reused steps before the first changed one could start.
    cached = object.__new__(type(outcome))
    cached.__dict__.update(outcome.__dict__)
    cached.status, cached.duration_s, cached.elements = StepStatus.CACHED, 0.0, elements
    return cached
