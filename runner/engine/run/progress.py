"""A run's progress per phase, as the run's row and its events show it."""

from __future__ import annotations

from ...pipeline.compiler import Plan
from .outcomes import StepStatus


class Progress:
    """Per phase (steps without one under "default"): total, done, skipped, failed, waiting.

    Kept incrementally: recomputing it per finished step was quadratic.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.finished: dict[str, StepStatus] = {}  # step id -> status
        self._counts: dict[str, dict[str, int]] | None = None

    def counts(self) -> dict[str, dict[str, int]]:
        if self._counts is None:
            self._counts = {}
            for sid in self.plan.order:
                phase = self.plan.steps[sid].phase or "default"
                entry = self._counts.setdefault(
                    phase, {"total": 0, "done": 0, "skipped": 0, "failed": 0, "waiting": 0}
                )
                entry["total"] += 1
            for sid, status in self.finished.items():
                self._count(sid, status)
        return self._counts

    def _count(self, sid: str, status: StepStatus) -> None:
        entry = self.counts()[self.plan.steps[sid].phase or "default"]
        if status.succeeded:
            entry["done"] += 1
        elif status is StepStatus.SKIPPED:
            entry["skipped"] += 1
        elif status in (StepStatus.AWAITING_HUMAN, StepStatus.AWAITING_BATCH):
            entry["waiting"] += 1
        else:  # failed, partial, rejected
            entry["failed"] += 1

    def mark(self, sid: str, status: StepStatus) -> None:
        if sid in self.finished:
            return
        self.finished[sid] = status
        if self._counts is not None:
            self._count(sid, status)
