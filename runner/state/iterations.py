"""Iteration records in the journal, derived from a run's `image` and `finalize` outputs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import NotFound, UsageError
from .journal import Journal
from .records import dumps, loads


@dataclass
class Iteration:
    id: str
    run_id: str
    step_id: str
    ordinal: int
    seed: int | None
    idempotency_key: str
    raw: str | None
    final: str | None
    ext: str | None
    compliant: bool | None
    compliance: Any
    picked: bool
    status: str
    error: str | None
    metadata: Any

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Iteration:
        return cls(
            id=r["id"],
            run_id=r["run_id"],
            step_id=r["step_id"],
            ordinal=r["ordinal"],
            seed=r["seed"],
            idempotency_key=r["idempotency_key"],
            raw=r["raw"],
            final=r["final"],
            ext=r["ext"],
            compliant=None if r["compliant"] is None else bool(r["compliant"]),
            compliance=loads(r["compliance"]) if r["compliance"] else None,
            picked=bool(r["picked"]),
            status=r["status"],
            error=r["error"],
            metadata=loads(r["metadata"]) if r["metadata"] else None,
        )

    @property
    def image(self) -> str | None:
        """The image a person looks at and exports: the final a finalize step made, else (a
        pipeline with no finalize step, or one not run yet) the raw the provider returned."""
        return self.final or self.raw

    @property
    def shows_raw(self) -> bool:
        """Whether ``image`` is the raw: no finalize step finalised this iteration."""
        return self.final is None and self.raw is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ordinal": self.ordinal,
            "seed": self.seed,
            "idempotency_key": self.idempotency_key,
            "status": self.status,
            "compliant": self.compliant,
            "picked": self.picked,
            "error": self.error,
            "assets": {"raw": self.raw, "final": self.final, "ext": self.ext},
            "compliance": self.compliance,
        }


def iteration_id(run_id: str, ordinal: int) -> str:
    return f"{run_id}-{ordinal}"


def record_iterations(
    journal: Journal,
    run_id: str,
    outcomes: dict[str, Any],
    image_steps: list[str],
    final_steps: list[str],
) -> list[Iteration]:
    """Write one row per iteration of this run (finalised data wins over raw-only data)."""
    merged: dict[int, dict[str, Any]] = {}
    step_of: dict[int, str] = {}
    for sid in image_steps + final_steps:
        out = outcomes.get(sid)
        if not isinstance(out, dict):
            continue
        for it in out.get("iterations") or []:
            ordinal = int(it.get("ordinal", 0))
            merged.setdefault(ordinal, {}).update({k: v for k, v in it.items() if v is not None})
            step_of[ordinal] = sid
    now = time.time()
    rows = []
    for ordinal, it in sorted(merged.items()):
        status = it.get("status", "failed")
        rows.append(
            {
                "id": iteration_id(run_id, ordinal),
                "run_id": run_id,
                "step_id": step_of[ordinal],
                "ordinal": ordinal,
                "seed": it.get("seed"),
                "idempotency_key": it.get("idempotency_key", ""),
                "raw": it.get("raw"),
                "final": it.get("final"),
                "ext": it.get("ext"),
                "compliant": None if "compliant" not in it else int(bool(it["compliant"])),
                "compliance": dumps(it["compliance"]) if it.get("compliance") is not None else None,
                "picked": 0,
                "status": "completed" if status == "completed" else "failed",
                "error": it.get("error"),
                "metadata": dumps(it.get("metadata")) if it.get("metadata") else None,
                "created_at": now,
            }
        )
    with journal.transaction() as conn:
        conn.execute("DELETE FROM iterations WHERE run_id=?", (run_id,))
        for row in rows:
            cols = ",".join(row)
            conn.execute(
                f"INSERT INTO iterations ({cols}) VALUES ({','.join('?' for _ in row)})",
                list(row.values()),
            )
    return [Iteration.from_row(r) for r in rows]


def iterations_of(journal: Journal, run_id: str) -> list[Iteration]:
    return [
        Iteration.from_row(r)
        for r in journal.query(
            "SELECT * FROM iterations WHERE run_id=? ORDER BY ordinal", (run_id,)
        )
    ]


def heal_lost(journal: Journal, objects: Any, its: list[Iteration]) -> None:
    """Iterations `runner verify --repair` marked lost whose images are whole in the store
    again (a later apply made the same bytes) are completed again, here and in the journal:
    the run's history did not change, only where its images were."""
    for it in its:
        if it.status != "lost" or not it.raw:
            continue
        if all(objects.has(d) for d in (it.raw, it.final) if d):
            journal.conn.execute(
                "UPDATE iterations SET status='completed', error=NULL WHERE id=? AND status='lost'",
                (it.id,),
            )
            it.status, it.error = "completed", None


def find_iteration(journal: Journal, ident: str) -> Iteration | None:
    rows = journal.query("SELECT * FROM iterations WHERE id=?", (ident,))
    return Iteration.from_row(rows[0]) if rows else None


def resolve_target(journal: Journal, ident: str) -> tuple[dict[str, Any], Iteration | None]:
    """A run id (or unique prefix) -> (run, None); an iteration id -> (its run, iteration).

    Raises NotFound for neither.
    """
    it = find_iteration(journal, ident)
    if it is not None:
        return journal.get_run(it.run_id), it
    return journal.get_run(ident), None


def pick(journal: Journal, run_id: str, which: str) -> Iteration:
    """Mark one iteration picked and clear its siblings, in one statement.

    ``which`` is an ordinal or an iteration id. Raises NotFound (exit 3) for unknown ones and
    UsageError (exit 2) for an iteration that is not completed.
    """
    run = journal.get_run(run_id)
    its = iterations_of(journal, run["id"])
    target = None
    for it in its:
        # ASCII digits only, and few: int('²') and int('9' * 5000) raise.
        ordinal = int(which) if which.isascii() and which.isdigit() and len(which) < 12 else -1
        if which == it.id or ordinal == it.ordinal:
            target = it
    if target is None:
        known = ", ".join(str(i.ordinal) for i in its) or "none"
        raise NotFound(f"run {run['id']} has no iteration '{which}' (ordinals: {known})")
    if target.status != "completed":
        raise UsageError(
            f"iteration #{target.ordinal} is {target.status}"
            + (f": {target.error}" if target.error else ""),
            hint=f"pick a completed one; see: runner runs show {run['id']}",
        )
    journal.conn.execute(
        "UPDATE iterations SET picked = CASE WHEN id=? THEN 1 ELSE 0 END WHERE run_id=?",
        (target.id, run["id"]),
    )
    target.picked = True
    return target


def run_outcome(its: list[Iteration]) -> tuple[str, int]:
    """Run status and exit code from its iterations (design/thumbnail.md)."""
    failed = [i for i in its if i.status != "completed"]
    if not its:
        return "failed", 4
    compliance_only = bool(failed) and all(
        (i.error or "").startswith("compliance") or i.compliant is False for i in failed
    )
    if not failed:
        return "completed", 0
    if len(failed) == len(its):
        return "failed", 5 if compliance_only else 4
    return "partial", 5 if compliance_only else 6


def settle_run(
    journal: Journal,
    run_id: str,
    plan: Any,
    outputs: dict[str, Any],
    status: str,
    exit_code: int,
) -> tuple[str, int]:
    """The run's status and exit code when it has image steps: its iterations are recorded and
    decide (``run_outcome``), before the run's end is journaled and reported, so the console,
    the journal, `runs show`, --json and the page all say the same.

    A gate or a cancel wins over the iteration counts, and so does a failure outside the
    iterations (e.g. a publish step after finalize): all iterations done is not a done run.
    """
    image_steps = [sid for sid in plan.order if plan.steps[sid].uses == "image"]
    final_steps = [sid for sid in plan.order if plan.steps[sid].uses == "finalize"]
    its = record_iterations(journal, run_id, outputs, image_steps, final_steps)
    profile = None
    for sid in image_steps:
        out = outputs.get(sid)
        if isinstance(out, dict) and out.get("provider_profile"):
            profile = out["provider_profile"]
    if profile is not None:
        journal.update_run(run_id, provider_profile=profile)
    if not its:
        # No image step made iterations of its own: each ran per for_each element (its
        # output is their list) or was skipped by `when:`. The steps' statuses decide.
        return status, exit_code
    settled, code = run_outcome(its)
    if exit_code in (7, 130) or (code == 0 and exit_code != 0):
        return status, exit_code
    return settled, code
