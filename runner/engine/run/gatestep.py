"""A human_gate within a run: pass on an approval of exactly what is shown now, else ask.

The decisions themselves live in gates.py (the journal's gate rows); this is what a run does
with them: ask a new round, wait on a pending one, or end the step approved or rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import InvalidPipeline
from ...pipeline.compiler import CachePolicy, CompiledStep, Plan
from ...state.canonical import digest as canonical_digest
from ...state.journal import CachedResults, Journal
from . import gates
from .events import EventType
from .keys import KeyParts
from .options import ApplyOptions
from .outcomes import StepOutcome, StepStatus
from .recorder import Recorder
from .reuse import Reuse


class GateHost(Protocol):
    """What a gate step reads and sets of the run around it: the Interpreter, which imports
    this module (so this one names the run by what it uses, not by its class)."""

    plan: Plan
    journal: Journal
    options: ApplyOptions
    run_id: str
    recorder: Recorder
    reuse: Reuse
    outcomes: dict[str, StepOutcome]
    cached: CachedResults
    revise_again: bool
    review_rows: dict[str, list[Any]]
    next_reviews: dict[str, list[Any]]

    def _resolve(
        self, step: CompiledStep, extra: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyParts]: ...


def is_gate(step: CompiledStep) -> bool:
    return bool(getattr(step.type, "is_gate", False))


def check_gates(plan: Plan) -> None:
    """Raises InvalidPipeline for a gate over a for_each or one revising an unknown step."""
    for step in plan.steps.values():
        if not is_gate(step):
            continue
        if step.for_each is not None:
            raise InvalidPipeline(
                f"step '{step.id}': a human_gate cannot use for_each", where=step.where
            )
        revise = revise_target(step)
        if revise is not None and revise not in plan.steps:
            raise InvalidPipeline(
                f"step '{step.id}': revise names an unknown step '{revise}'", where=step.where
            )


@dataclass(frozen=True)
class Recall:
    """A decision another run made on exactly the inputs the gate has now, and what to do
    when it was a revision (its target must run again with the review, in this run)."""

    row: gates.DecisionRow | None
    # target -> the revisions its current review is made of; told the longer chain to follow
    chain: Callable[[str], list[gates.DecisionRow]]
    revised: Callable[[str, list[gates.DecisionRow]], None]


def run(interp: GateHost, step: CompiledStep) -> StepOutcome:
    """A human_gate: pass on an approval of exactly what is shown now, else ask (suspend)."""
    args, parts = interp._resolve(step, {})
    key = gate_key(interp, step, parts.key())
    reask = step.id in interp.options.force or step.id in interp.options.reask
    old = (
        None
        if reask
        else gates.remembered(
            interp.journal, pipeline=interp.plan.name, gate=step.id, key=key, run_id=interp.run_id
        )
    )
    hit = interp.cached.get((step.id, key))
    if (
        hit is not None
        and hit.status == "completed"
        and step.cache is CachePolicy.USE
        and not reask
        and not asked_here(interp.journal, interp.run_id, step.id, key)
        and (old is None or old.decision is gates.Decision.APPROVE)  # the latest decision wins
        and interp.reuse.usable(hit)
    ):
        # Approved before with these very inputs (an earlier run): no need to ask again. The
        # approval becomes this run's decision too, as a recalled one does: the run's history
        # shows every decision its outcome rests on, not only the revisions taken on the way.
        if old is not None:
            adopt_once(interp.journal, old, run_id=interp.run_id, gate=step.id)
        interp.recorder.emit(EventType.STEP_SKIPPED, step.id, reason="cached", key=key, restored=[])
        interp.recorder.reused(step.id, -1, key, hit.output, "approved before with the same inputs")
        return StepOutcome(step.id, StepStatus.CACHED, key, hit.output)

    def revised(target: str, chain: list[gates.DecisionRow]) -> None:
        interp.next_reviews[target] = chain
        interp.revise_again = True

    def chain(target: str) -> list[gates.DecisionRow]:
        return list(interp.review_rows.get(target, []))

    return decide(step, key, args, interp.journal, interp.recorder, Recall(old, chain, revised))


def adopt_once(journal: Journal, row: gates.DecisionRow, *, run_id: str, gate: str) -> None:
    """Record ``row`` (another run's decision on these inputs) as this run's next round of
    ``gate``, unless this run holds it already (a pass that met the gate again)."""
    rows = gates.decisions(journal, run_id, gate)
    if any(r.summary.get("remembered_from") == row.run_id and r.key == row.key for r in rows):
        return
    round_ = 1 + sum(r.status is gates.RowStatus.DECIDED for r in rows)
    gates.adopt(journal, row, run_id=run_id, round_=round_)


def asked_here(journal: Journal, run_id: str, gate: str, key: str) -> bool:
    """Whether this run asked ``gate`` about ``key`` (pending or decided): what it asked is
    newer than any approval of another run, so the question is answered by this run's rows
    (a `--reask` or `--force` asked it again; the run's continuation carries neither flag)."""
    return any(
        r.key == key and r.status is not gates.RowStatus.SUPERSEDED
        for r in gates.decisions(journal, run_id, gate)
    )


def gate_key(interp: Any, step: CompiledStep, args_key: str) -> str:
    """What a decision is about: this item, the gate's arguments and its upstream results."""
    upstream = {
        d: interp.outcomes[d].key or [e.key for e in interp.outcomes[d].elements or []]
        for d in step.deps
    }
    return canonical_digest({"args": args_key, "item": interp.options.item, "upstream": upstream})


def first_pass(plan: Plan, journal: Journal) -> frozenset[str] | None:
    """The steps a run's first pass starts when a gate of the plan was revised before (its
    revision may be taken again, and the run then goes round once more): those gates and what
    they read. None when no gate was, and the run is one pass."""
    revised = [
        s.id
        for s in plan.steps.values()
        if is_gate(s)
        and revise_target(s) is not None
        and gates.revised_before(journal, pipeline=plan.name, gate=s.id)
    ]
    if not revised:
        return None
    needed, todo = set(revised), list(revised)
    while todo:
        for dep in plan.steps[todo.pop()].deps:
            if dep not in needed:
                needed.add(dep)
                todo.append(dep)
    return frozenset(needed)


def revise_target(step: CompiledStep) -> str | None:
    raw = step.args.get("revise") if isinstance(step.args, dict) else None
    return raw if isinstance(raw, str) else None


def load_reviews(plan: Plan, journal: Journal, run_id: str) -> dict[str, dict[str, Any]]:
    """Revise target step -> the review a gate of this run asked it to address."""
    reviews: dict[str, dict[str, Any]] = {}
    rows = gates.decisions(journal, run_id)
    for step in plan.steps.values():
        target = revise_target(step) if is_gate(step) else None
        if target is None:
            continue
        review = gates.review_for([r for r in rows if r.gate == step.id])
        if review is not None:
            reviews[target] = review
    return reviews


def decide(
    step: CompiledStep,
    key: str,
    args: dict[str, Any],
    journal: Journal,
    recorder: Recorder,
    recall: Recall | None = None,
) -> StepOutcome:
    """The gate's outcome from its rows: decided on ``key``, still pending, decided before on
    the same inputs (``recall``), or asked anew."""
    run_id = recorder.run_id
    rows = gates.decisions(journal, run_id, step.id)
    last = rows[-1] if rows else None
    # A revision, like an approval, holds for the inputs it was decided on: the run's passes
    # meet its rounds again one by one (the target with each round's review), and inputs that
    # changed meet none of them.
    decided = [r for r in rows if r.status is gates.RowStatus.DECIDED and r.key == key]
    if decided and decided[-1].decision in (gates.Decision.APPROVE, gates.Decision.REJECT):
        return _decided(step, key, decided[-1], recorder)
    if decided and decided[-1].decision is gates.Decision.REVISE and recall is not None:
        return _revised(step, key, rows, decided[-1], recall, recorder)
    if last is not None and last.status is gates.RowStatus.PENDING and last.key == key:
        return _awaiting(step, key, last.round, last.summary, recorder, again=True)
    # A round is a question after each decision: one superseded unanswered (the inputs
    # changed, maybe back) is asked again in the same round, not counted as a revision.
    round_ = 1 + sum(r.status is gates.RowStatus.DECIDED for r in rows)
    if (
        recall is not None
        and recall.row is not None
        and (recall.row.decision is not gates.Decision.REVISE or revise_target(step) is not None)
    ):
        return _recalled(step, key, recall, journal, recorder, round_)
    # Nothing asked yet, a revision was made, or what is shown changed: ask (a new round).
    summary = {
        "summary": args.get("summary"),
        "show": args.get("show"),
        "images": args.get("images") or [],
        "revise": args.get("revise"),
        "round": round_,
        "step": step.id,
    }
    gates.request_decision(
        journal, run_id=run_id, gate=step.id, round_=round_, key=key, summary=summary
    )
    return _awaiting(step, key, round_, summary, recorder, again=False)


def _recalled(
    step: CompiledStep,
    key: str,
    recall: Recall,
    journal: Journal,
    recorder: Recorder,
    round_: int,
) -> StepOutcome:
    """This run takes the decision another run made on the same inputs (as a fresh run would
    be given it again): approve and reject end the gate; a revision sends its target round
    again with the review, and the gate then sees what it saw after that revision."""
    old = recall.row
    assert old is not None
    row = gates.adopt(journal, old, run_id=recorder.run_id, round_=round_)
    past = {"approve": "approved", "reject": "rejected"}.get(
        row.decision.value if row.decision else ""
    )
    how = f"{past or 'decided'} before with the same inputs"
    source = f"by {old.by}, run {old.run_id}"
    if row.decision is not gates.Decision.REVISE:
        return _decided(step, key, row, recorder, remembered=f"{how} ({source})")
    rows = gates.decisions(journal, recorder.run_id, step.id)
    return _revised(step, key, rows, row, recall, recorder, source=source)


def _revised(
    step: CompiledStep,
    key: str,
    rows: list[gates.DecisionRow],
    row: gates.DecisionRow,
    recall: Recall,
    recorder: Recorder,
    *,
    source: str | None = None,
) -> StepOutcome:
    """A revision decided on exactly these inputs: the target goes round again (the run's next
    pass) with the review of every revision up to this one."""
    target = revise_target(step)
    if target is None:  # cannot happen for a gate that was revised
        return _awaiting(step, key, row.round, row.summary, recorder, again=True)
    # The review is the one the target was made with (what the gate was shown came from it)
    # and this revision: revisions decided on other inputs are not part of it.
    recall.revised(target, [*recall.chain(target), row])
    if source is not None:  # said: the user did not just decide it
        reason = f"revised before with the same inputs ({source}): '{target}' runs again"
        recorder.emit(EventType.STEP_SKIPPED, step.id, reason=reason + " with the review", key=key)
    else:  # this run's own revision, which its user asked for: the next pass shows it
        reason = f"revised by {row.by} (round {row.round}): '{target}' runs again"
    return StepOutcome(step.id, StepStatus.SKIPPED, key, reason=reason + " with the review")


def _awaiting(
    step: CompiledStep,
    key: str,
    round_: int,
    summary: dict[str, Any],
    recorder: Recorder,
    *,
    again: bool,
) -> StepOutcome:
    reason = (
        f"waiting for a decision: runner decide {recorder.run_id} {step.id} approve|reject|revise"
    )
    recorder.emit(
        EventType.GATE_AWAITING, step.id, key=key, round=round_, summary=summary, again=again
    )
    recorder.awaiting(step.id, key, round_)
    return StepOutcome(step.id, StepStatus.AWAITING_HUMAN, key, reason=reason)


def _decided(
    step: CompiledStep,
    key: str,
    row: gates.DecisionRow,
    recorder: Recorder,
    *,
    remembered: str | None = None,
) -> StepOutcome:
    assert row.decision is not None
    output = {
        "decision": row.decision.value,
        "by": row.by,
        "comment": row.comment,
        "input": row.input,
        "round": row.round,
    }
    recorder.emit(
        EventType.GATE_DECIDED,
        step.id,
        decision=row.decision.value,
        by=row.by,
        round=row.round,
        key=key,
    )
    artifacts = [row.artifact] if row.artifact else []
    approved = row.decision is gates.Decision.APPROVE
    recorder.decided(
        step.id,
        key,
        status="completed" if approved else "rejected",
        output=output,
        artifacts=artifacts,
        why=remembered or f"{row.decision.value} by {row.by} (round {row.round})",
    )
    if approved:
        recorder.emit(EventType.STEP_PASSED, step.id, key=key, duration_s=0.0, attempts=1)
        return StepOutcome(step.id, StepStatus.RAN, key, output)
    reason = f"rejected by {row.by}" + (f": {row.comment}" if row.comment else "")
    if remembered is not None:
        reason = (
            f"{remembered}"
            + (f": {row.comment}" if row.comment else "")
            + f"; ask again with --reask {step.id}"
        )
    recorder.emit(EventType.STEP_FAILED, step.id, reason=reason, rejected=True)
    return StepOutcome(step.id, StepStatus.REJECTED, key, output, reason)
