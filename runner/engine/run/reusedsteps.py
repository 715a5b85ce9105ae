"""Steps a caller's earlier outcomes answer (watch's last cycle, `RunOptions.reuse`): which
the scheduler may answer first, in one pass, and how each is journaled in this run."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ...pipeline.compiler import Plan
from .outcomes import StepOutcome, StepStatus
from .recorder import Recorder

WHY = "cached (unchanged since the last cycle)"


def owed(
    plan: Plan, reuse: Mapping[str, StepOutcome] | None, gates: Collection[str]
) -> frozenset[str]:
    """The steps the caller's outcomes answer whatever else happens (see Scheduler.run): plain
    steps reused whose every ancestor is one too (so none is ever blocked)."""
    if not reuse:
        return frozenset()
    found: set[str] = set()
    for sid in plan.order:
        step = plan.steps[sid]
        if (
            sid in reuse
            and step.when is None
            and step.for_each is None
            and sid not in gates
            and all(d in found for d in step.deps)
        ):
            found.add(sid)
    return frozenset(found)


def journal(recorder: Recorder, outcome: StepOutcome) -> StepOutcome:
    """A step answered by the caller's earlier outcome is journaled in this run as a cached
    one is: its rows name each result's key, so the run shows it and gc keeps what it used."""
    if outcome.elements is not None:
        for e in outcome.elements:
            if e.key is not None and e.status is StepStatus.CACHED:
                recorder.reused(outcome.id, e.index, e.key, e.output, WHY)
    elif outcome.key is not None:
        recorder.reused(outcome.id, -1, outcome.key, outcome.output, WHY)
    return outcome
