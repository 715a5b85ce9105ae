"""How a run that just stopped reads in the terminal (apply, resume, decide).

One summary line, each failed step with its reason, and, when the run stops at a human gate,
what waits and the exact `runner decide` commands; a rejected run says who rejected it and which
steps did not run. Steps are never called FAILED for a reviewer's rejection.
"""

from __future__ import annotations

from typing import Any

from ..counts import COUNTED, Tally, report_tally, tally_text

WIDTH = 80  # the summary line fits a terminal's columns


def summary_line(status: str, tally: Tally, run_id: str) -> str:
    """``completed: ran 1 step and 2 elements, cached 1 step  (run ID)``: what happened to the
    run's steps, a for_each step counted by its elements (surfaces/counts.py). Wider than 80
    columns, the run id goes on a line of its own."""
    head = f"{status}: {tally_text(tally, COUNTED) or 'nothing to do'}"
    line = f"{head}  (run {run_id})"
    return line if len(line) <= WIDTH else f"{head}\n  (run {run_id})"


def end_text(state: Any, report: Any) -> str:
    """The text after a run stops (``report`` is the engine's RunReport)."""
    lines = [summary_line(report.status.value, report_tally(report), report.run_id)]
    if report.status.value == "awaiting_batch":  # batch mode: the provider works on it
        waiting = [o for o in report.steps if o.status.value == "awaiting_batch"]
        lines += [f"  waiting: {o.id}: {o.reason}" for o in waiting]
        lines.append(
            f"  the provider answers within its batch window; `runner apply` (or `runner resume "
            f"{report.run_id}`) collects what is done, `runner runs cancel {report.run_id}` "
            "cancels the batch"
        )
        return "\n".join(lines) + "\n"
    said = ("failed", "partial", "rejected")
    # (a budget stop says why even when no step failed: a batch it kept from being made)
    stopped = report.status.value == "interrupted" and report.reason
    if report.status.value != "awaiting_human" and not stopped and not any(
        o.status.value in said for o in report.steps
    ):
        return lines[0] + "\n"  # the common end: the review's text helpers are not imported
    from ...engine.run.gates import pending_gates
    from ...review.gateview import printable, waiting_text

    for o in report.steps:
        if o.status.value in ("failed", "partial") and o.reason:
            lines.append(f"  {o.status.value}: {o.id}: {printable(o.reason)}")
    if report.status.value == "interrupted" and report.reason:
        lines.append(f"  stopped: {printable(report.reason)}")  # a budget on real spend
    rejected = [o for o in report.steps if o.status.value == "rejected"]
    for o in rejected:
        lines.append(f"  {o.id}: {printable(o.reason or '')}")
        not_run = [
            s.id
            for s in report.steps
            if s.status.value == "skipped" and (s.reason or "").startswith("rejected at")
        ]
        if not_run:
            lines.append(f"  not run: {', '.join(not_run)}")
    text = "\n".join(lines) + "\n"
    if report.status.value == "awaiting_human":
        text += waiting_text(pending_gates(state.journal, report.run_id), report.run_id)
    return text
