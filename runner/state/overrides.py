"""User edits of a step's stored output, reused while the step's contract holds.

A person may correct what a model produced (`runner edit RUN STEP [--element K]`). The edit is
stored as an override bound to the step's contract: the value of its `contract:` expression
(typically the hash of the prompt card the output was made from), or, for a step without one,
its cache key. Later applies reuse the edit while the contract is unchanged; when the card
drifted, is missing or is invalid, the edit is set aside (kept, reported) and the step
regenerates. An edit is a result of its inputs, like a step's output of its key: set aside, it
comes back when the contract does (an input changed, then put back exactly).

A for_each element's edit is of what the element is (``identity``: the digest of its item), not
of the index it had: a reordered list keeps each element's edit. (Edits recorded before the
identity was kept have none and follow their index.)
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..errors import NotFound, UsageError
from .journal import Journal
from .records import dumps, loads
from .repeats import as_own


@dataclass
class Override:
    """A user's edit of a step's (or an element's) stored output, bound to the step's contract."""

    id: int
    pipeline: str
    step_id: str
    element: int
    contract: str | None
    output: Any
    status: str
    reason: str | None
    created_at: float
    identity: str | None = None

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Override:
        return cls(
            identity=r.get("identity"),
            id=int(r["id"]),
            pipeline=r["pipeline"],
            step_id=r["step_id"],
            element=int(r["element"]),
            contract=r["contract"],
            output=loads(r["output"]),
            status=r["status"],
            reason=r["reason"],
            created_at=float(r["created_at"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pipeline": self.pipeline,
            "step": self.step_id,
            "element": None if self.element == -1 else self.element,
            "contract": self.contract,
            "status": self.status,
            "reason": self.reason,
            "created_at": self.created_at,
            "output": self.output,
        }


def standing(
    journal: Journal,
    pipeline: str,
    step_id: str,
    element: int,
    identity: str | None = None,
    present: Collection[str] | None = None,
) -> list[Override]:
    """The edits of one element that may answer it, newest first: the active one and those set
    aside when their contract changed (each comes back with its contract). The element is
    found by ``identity`` (its item's digest) when both it and the edit have one, else by
    index; an edit whose item is in none of the list's elements now (``present``: their
    identities) is of the element at its index (the item was edited in place), so its
    contract decides, as before identities."""
    rows = journal.query(
        "SELECT * FROM overrides WHERE pipeline=? AND step_id=? AND status IN "
        "('active','set_aside') ORDER BY id DESC",
        (pipeline, step_id),
    )
    out = []
    for r in rows:
        ov = Override.from_row(r)
        if ov.identity is None or identity is None:
            same = ov.element == element
        else:
            gone = present is not None and ov.identity not in present
            same = ov.identity == identity or (gone and ov.element == element)
        if same:
            out.append(ov)
    return out


def holding(edits: list[Override], contract: str | None) -> Override | None:
    """Of ``standing``'s edits, the newest made under ``contract`` (None: no edit holds)."""
    if contract is None:
        return None
    return next((ov for ov in edits if ov.contract == contract), None)


def active(
    journal: Journal, pipeline: str, step_id: str, element: int, identity: str | None = None
) -> Override | None:
    """The element's active edit (what the last apply that met it used), or None."""
    return next(
        (
            ov
            for ov in standing(journal, pipeline, step_id, element, identity)
            if ov.status == "active"
        ),
        None,
    )


def any_active(journal: Journal, pipeline: str) -> set[str]:
    """Step ids of a pipeline with an edit that may answer an element (active, or set aside
    until its contract comes back), so the engine checks only those."""
    rows = journal.query(
        "SELECT DISTINCT step_id FROM overrides WHERE pipeline=? AND status IN "
        "('active','set_aside')",
        (pipeline,),
    )
    return {r["step_id"] for r in rows}


def set_aside(journal: Journal, override_id: int, reason: str) -> None:
    journal.conn.execute(
        "UPDATE overrides SET status='set_aside', reason=? WHERE id=?", (reason, override_id)
    )


def revive(journal: Journal, override_id: int) -> None:
    """An edit set aside whose contract came back answers its element again."""
    journal.conn.execute(
        "UPDATE overrides SET status='active', reason=NULL WHERE id=?", (override_id,)
    )


def execution_for(journal: Journal, run_id: str, step_id: str, element: int) -> dict[str, Any]:
    """The finished execution an edit starts from. Raises NotFound / UsageError."""
    run = journal.get_run(run_id)
    held = journal.rows_run(run["id"])  # a no-op that repeats another's rows: those
    rows = journal.query(
        "SELECT * FROM executions WHERE run_id=? AND step_id=? AND element=? "
        "AND status IN ('completed','cached','partial') ORDER BY id DESC LIMIT 1",
        (held, step_id, element),
    )
    if held != run["id"]:
        rows = as_own(rows, run)
    if not rows:
        steps = sorted({r["step_id"] for r in journal.executions(run["id"])})
        if step_id not in steps:
            raise NotFound(
                f"run {run['id']} has no step '{step_id}'",
                hint="steps: " + ", ".join(steps) if steps else None,
            )
        what = f"element {element} of " if element != -1 else ""
        raise NotFound(f"run {run['id']} has no finished {what}step '{step_id}'")
    row = rows[0]
    journal.fill_cached(row)  # a no-op run's row names its result by key
    if row.get("key_parts") is None and row.get("key"):
        # a cached row does not repeat its key's parts: the execution that made it has them
        # (the element's identity is among them)
        made = journal.query(
            "SELECT key_parts FROM executions WHERE pipeline=? AND key=? "
            "AND key_parts IS NOT NULL ORDER BY id DESC LIMIT 1",
            (run["pipeline"], row["key"]),
        )
        if made:
            row["key_parts"] = made[0]["key_parts"]
    if row["output"] is None:
        raise UsageError(f"step '{step_id}' of run {run['id']} has no stored output to edit")
    return {"run": run, "execution": row}


def record(
    journal: Journal,
    *,
    pipeline: str,
    step_id: str,
    element: int,
    contract: str | None,
    output: Any,
    identity: str | None = None,
) -> Override:
    """Store an edit. An earlier edit of the same element under the same contract is
    superseded; one active under another contract is set aside (it comes back with its
    contract, as any edit set aside does)."""
    now = time.time()
    earlier = standing(journal, pipeline, step_id, element, identity)
    with journal.transaction() as conn:
        for ov in earlier:
            if ov.contract == contract:
                conn.execute("UPDATE overrides SET status='superseded' WHERE id=?", (ov.id,))
            elif ov.status == "active":
                conn.execute(
                    "UPDATE overrides SET status='set_aside', reason=? WHERE id=?",
                    (f"edit made under another contract: {(contract or '')[:16]}", ov.id),
                )
        cur = conn.execute(
            "INSERT INTO overrides (pipeline, step_id, element, contract, output, status, "
            "created_at, identity) VALUES (?,?,?,?,?,'active',?,?)",
            (pipeline, step_id, element, contract, dumps(output), now, identity),
        )
        oid = int(cur.lastrowid or 0)
    return Override(
        oid, pipeline, step_id, element, contract, output, "active", None, now, identity
    )


# The edits that may answer an element: in force, or set aside until their contract comes back.
STANDING = ("active", "set_aside")
DROPPED = "dropped"  # undone by `runner edits drop`: never answers again


def list_overrides(
    journal: Journal, pipeline: str | None = None, *, standing_only: bool = False
) -> list[Override]:
    """Every edit (of ``pipeline`` when given), oldest first; ``standing_only``: only those
    that may answer an element (active or set aside), not superseded or dropped ones."""
    where, args = [], []
    if pipeline is not None:
        where.append("pipeline=?")
        args.append(pipeline)
    if standing_only:
        where.append(f"status IN ({','.join('?' * len(STANDING))})")
        args.extend(STANDING)
    sql = "SELECT * FROM overrides" + (" WHERE " + " AND ".join(where) if where else "")
    return [Override.from_row(r) for r in journal.query(sql + " ORDER BY id", tuple(args))]


def drop(
    journal: Journal,
    *,
    edit_id: int | None = None,
    step_id: str | None = None,
    pipeline: str | None = None,
    element: int | None = None,
) -> list[Override]:
    """Undo edits: the standing edit ``edit_id``, or every standing edit of ``step_id`` (of
    one ``element`` when given; -1 is a step without for_each). A dropped edit is kept in the
    journal (status ``dropped``) but never answers again: the next apply uses the step's own
    output for its key, or runs it. Returns the edits dropped.

    Raises NotFound when nothing standing matches, UsageError when ``step_id`` has edits in
    several pipelines and ``pipeline`` does not say which.
    """
    edits = list_overrides(journal, pipeline, standing_only=True)
    if edit_id is not None:
        chosen = [ov for ov in edits if ov.id == edit_id]
        what = f"edit #{edit_id}"
    else:
        chosen = [
            ov
            for ov in edits
            if ov.step_id == step_id and (element is None or ov.element == element)
        ]
        what = f"step '{step_id}'" + (f" element {element}" if element not in (None, -1) else "")
    if not chosen:
        left = ", ".join(f"#{ov.id} {ov.step_id}" for ov in edits[:10])
        raise NotFound(
            f"no edit in force for {what}" + (f" of pipeline '{pipeline}'" if pipeline else ""),
            hint=f"edits in force: {left}" if left else "no edit is in force (runner edits list)",
        )
    pipelines = sorted({ov.pipeline for ov in chosen})
    if len(pipelines) > 1:
        raise UsageError(
            f"{what} has edits in pipelines {', '.join(pipelines)}",
            hint="say which with --pipeline NAME",
        )
    with journal.transaction() as conn:
        for ov in chosen:
            conn.execute(
                "UPDATE overrides SET status=?, reason=? WHERE id=?",
                (DROPPED, "dropped by runner edits drop", ov.id),
            )
    for ov in chosen:
        ov.status, ov.reason = DROPPED, "dropped by runner edits drop"
    return chosen


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def check_shape(step_id: str, old: Any, new: Any) -> None:
    """An edit keeps the output's shape: the same fields, each of the same JSON kind (a null
    may become anything). Later steps read those fields; `{"bogus": 1}` in place of a card
    would reach them as a missing field, or worse as a wrong one."""
    if not isinstance(old, dict):
        if _kind(old) not in ("null", _kind(new)):
            raise UsageError(
                f"the edited output of '{step_id}' must stay a {_kind(old)} (got a {_kind(new)})"
            )
        return
    if not isinstance(new, dict):
        raise UsageError(
            f"the edited output of '{step_id}' must stay an object with the fields "
            f"{', '.join(old)} (got a {_kind(new)})"
        )
    unknown = [k for k in new if k not in old]
    missing = [k for k in old if k not in new]
    wrong = [
        f"{k} ({_kind(old[k])}, got {_kind(new[k])})"
        for k in old
        if k in new and old[k] is not None and _kind(old[k]) != _kind(new[k])
    ]
    problems = []
    if unknown:
        problems.append("unknown field(s) " + ", ".join(unknown))
    if missing:
        problems.append("missing field(s) " + ", ".join(missing))
    if wrong:
        problems.append("field(s) of another kind: " + ", ".join(wrong))
    if problems:
        raise UsageError(
            f"the edited output of '{step_id}' does not keep the step's output: "
            + "; ".join(problems),
            hint=f"edit the values of {', '.join(old)}; nothing was stored",
        )
