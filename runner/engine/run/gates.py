"""Human gates: pending and recorded decisions in the journal's ``decisions`` table.

A gate asks once per round: the interpreter records a pending row (with what the reviewer must
see and the digest of it, ``key``); ``record_decision`` fills it in. A decision applies only to
what was shown: when the gate's inputs change, the next apply asks again (a new round).
"""

from __future__ import annotations

import enum
import getpass
import os
import time
from dataclasses import dataclass
from typing import Any

from ...errors import NotFound, StoreError, UsageError
from ...state.canonical import canonical_json
from ...state.journal import Journal
from ...state.objects import ObjectStore
from ...state.records import REPAIR_HINT, dumps, loads


class Decision(enum.Enum):
    APPROVE = "approve"
    REJECT = "reject"
    REVISE = "revise"


class RowStatus(enum.Enum):
    PENDING = "pending"
    DECIDED = "decided"
    SUPERSEDED = "superseded"  # the gate's inputs changed before anyone decided


@dataclass(frozen=True)
class DecisionRow:
    id: int
    run_id: str
    gate: str
    status: RowStatus
    decision: Decision | None
    by: str | None
    comment: str | None
    input: dict[str, Any]
    summary: dict[str, Any]
    round: int
    key: str | None
    artifact: str | None
    requested_at: float | None
    decided_at: float | None

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> DecisionRow:
        """Raises StoreError for a row whose status is NULL (damage `runner verify` names and
        `--repair` mends), not a traceback from every command that reads the run's gates."""
        if r["status"] is None:
            raise StoreError(
                f"the journal holds a damaged record (decisions #{r['id']}): status is NULL",
                hint=REPAIR_HINT,
            )
        return cls(
            id=int(r["id"]),
            run_id=r["run_id"],
            gate=r["gate"],
            status=RowStatus(r["status"]),
            decision=Decision(r["decision"]) if r["decision"] else None,
            by=r["by"],
            comment=r["comment"],
            input=loads(r["input"]) or {},
            summary=loads(r["summary"]) or {},
            round=int(r["round"] or 1),
            key=r.get("key"),
            artifact=r["artifact"],
            requested_at=r["requested_at"],
            decided_at=r["decided_at"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "round": self.round,
            "status": self.status.value,
            "decision": self.decision.value if self.decision else None,
            "by": self.by,
            "comment": self.comment,
            "input": self.input,
            "summary": self.summary,
            "artifact": self.artifact,
            "requested_at": self.requested_at,
            "decided_at": self.decided_at,
        }


def decisions(journal: Journal, run_id: str, gate: str | None = None) -> list[DecisionRow]:
    """Every decision row of a run (of one gate when given), oldest first."""
    sql = "SELECT * FROM decisions WHERE run_id=?"
    args: tuple[Any, ...] = (run_id,)
    if gate is not None:
        sql += " AND gate=?"
        args = (run_id, gate)
    return [DecisionRow.from_row(r) for r in journal.query(sql + " ORDER BY id", args)]


def request_decision(
    journal: Journal, *, run_id: str, gate: str, round_: int, key: str, summary: dict[str, Any]
) -> None:
    """Record a pending decision; an older pending row of the gate is superseded."""
    journal.conn.execute(
        "UPDATE decisions SET status=? WHERE run_id=? AND gate=? AND status=?",
        (RowStatus.SUPERSEDED.value, run_id, gate, RowStatus.PENDING.value),
    )
    journal.conn.execute(
        "INSERT INTO decisions (run_id, gate, status, summary, requested_at, round, key) "
        "VALUES (?,?,?,?,?,?,?)",
        (run_id, gate, RowStatus.PENDING.value, dumps(summary), time.time(), round_, key),
    )


def remembered(
    journal: Journal, *, pipeline: str, gate: str, key: str, run_id: str
) -> DecisionRow | None:
    """The latest decision a run of ``pipeline`` made at ``gate`` on exactly these inputs
    (``key`` holds the item, the gate's arguments and its upstream keys), or None.

    A decision is a result of what the reviewer was shown, like a step's output of its key:
    an approval, a rejection and a revision are each given again for the same inputs. That
    holds within ``run_id`` too, for an approval or a rejection of an earlier round whose inputs
    came back (its revisions are its reviews already, gatestep.load_reviews).
    """
    rows = journal.query(
        "SELECT d.* FROM decisions d JOIN runs r ON r.id = d.run_id "
        "WHERE d.gate=? AND d.key=? AND d.status=? AND r.pipeline=? "
        "AND (d.run_id<>? OR d.decision IN (?,?)) "
        "ORDER BY d.decided_at DESC, d.id DESC LIMIT 1",
        (
            gate,
            key,
            RowStatus.DECIDED.value,
            pipeline,
            run_id,
            Decision.APPROVE.value,
            Decision.REJECT.value,
        ),
    )
    return DecisionRow.from_row(rows[0]) if rows else None


def revised_before(journal: Journal, *, pipeline: str, gate: str) -> bool:
    """Whether a run of ``pipeline`` (the current one included) ever had ``gate`` revised."""
    rows = journal.query(
        "SELECT 1 FROM decisions d JOIN runs r ON r.id = d.run_id WHERE d.gate=? AND "
        "d.decision=? AND d.status=? AND r.pipeline=? LIMIT 1",
        (gate, Decision.REVISE.value, RowStatus.DECIDED.value, pipeline),
    )
    return bool(rows)


def adopt(journal: Journal, row: DecisionRow, *, run_id: str, round_: int) -> DecisionRow:
    """Record ``row`` (a decision of another run on the same inputs) as this run's decision of
    round ``round_``: who decided, what and when stay the reviewer's; the summary names the run
    it came from."""
    summary = {**row.summary, "round": round_, "remembered_from": row.run_id}
    cur = journal.conn.execute(
        "INSERT INTO decisions (run_id, gate, status, decision, by, comment, input, summary, "
        "requested_at, decided_at, artifact, round, key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            run_id,
            row.gate,
            RowStatus.DECIDED.value,
            row.decision.value if row.decision else None,
            row.by,
            row.comment,
            dumps(row.input),
            dumps(summary),
            time.time(),
            row.decided_at,
            row.artifact,
            round_,
            row.key,
        ),
    )
    found = journal.query("SELECT * FROM decisions WHERE id=?", (cur.lastrowid,))
    return DecisionRow.from_row(found[0])


def review_for(rows: list[DecisionRow]) -> dict[str, Any] | None:
    """The revision context of a gate's target step: every `revise` so far, in order.

    None when nothing was revised. ``feedback`` holds one line per comment or input field, so a
    step type that takes feedback (llm) sees the reviewer's words.
    """
    revisions = [r for r in rows if r.decision is Decision.REVISE]
    if not revisions:
        return None
    feedback: list[str] = []
    merged: dict[str, Any] = {}
    for r in revisions:
        if r.comment:
            feedback.append(f"reviewer: {r.comment}")
        for k, v in r.input.items():
            feedback.append(f"reviewer {k}: {v}")
            merged[k] = v
    return {"round": len(revisions), "feedback": feedback, "input": merged}


def default_reviewer() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def record_decision(
    journal: Journal,
    objects: ObjectStore,
    run_id: str,
    gate: str,
    decision: Decision,
    *,
    input: dict[str, Any] | None = None,
    by: str | None = None,
    comment: str | None = None,
) -> DecisionRow:
    """Decide the pending gate ``gate`` of ``run_id``; the decision document is stored as an
    object and referenced by the row. The next apply (or ``runner resume``) acts on it.

    Raises NotFound (exit 3) for an unknown run or a gate the run never reached, UsageError
    (exit 2) when the run is not waiting or the gate's pending round is already decided.
    """
    run = journal.get_run(run_id)
    run_id = run["id"]
    rows = decisions(journal, run_id, gate)
    if run["status"] != "awaiting_human":
        raise UsageError(
            f"run {run_id} is not waiting for a decision (status {run['status']})",
            hint="list waiting runs with: runner runs list --awaiting",
        )
    if not rows:
        waiting = sorted(
            {r.gate for r in decisions(journal, run_id) if r.status is RowStatus.PENDING}
        )
        raise NotFound(
            f"run {run_id} has no gate '{gate}'",
            hint=f"gates waiting: {', '.join(waiting) or 'none'}",
        )
    pending = [r for r in rows if r.status is RowStatus.PENDING]
    if not pending:
        last = rows[-1]
        shown = last.decision.value if last.decision else last.status.value
        raise UsageError(
            f"gate '{gate}' of run {run_id} is already decided ({shown} by {last.by})",
            hint=f"continue the run with: runner resume {run_id}",
        )
    row = pending[-1]
    by = by or default_reviewer()
    decided_at = time.time()
    document = {
        "run_id": run_id,
        "gate": gate,
        "round": row.round,
        "decision": decision.value,
        "by": by,
        "comment": comment,
        "input": input or {},
        "decided_at": decided_at,
        "key": row.key,
    }
    data = canonical_json(document).encode("utf-8")
    with objects.in_use():  # stored and referenced before a gc may look
        artifact = objects.put_bytes(data)
        journal.record_artifacts({artifact: len(data)})
        cur = journal.conn.execute(
            "UPDATE decisions SET status=?, decision=?, by=?, comment=?, input=?, decided_at=?, "
            "artifact=? WHERE id=? AND status=?",
            (
                RowStatus.DECIDED.value,
                decision.value,
                by,
                comment,
                dumps(input or {}),
                decided_at,
                artifact,
                row.id,
                RowStatus.PENDING.value,
            ),
        )
    if cur.rowcount != 1:  # another `decide` got there first
        raise UsageError(f"gate '{gate}' of run {run_id} was decided meanwhile")
    found = decisions(journal, run_id, gate)
    return next(r for r in found if r.id == row.id)


def pending_gates(journal: Journal, run_id: str) -> list[DecisionRow]:
    return [r for r in decisions(journal, run_id) if r.status is RowStatus.PENDING]
