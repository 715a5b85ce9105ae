"""Acting on a run from outside it: resume, cancel, read its event stream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import NotFound, UsageError
from ...pipeline.compiler import Plan
from ...state.interrupt import process_alive
from ...state.journal import Journal
from ...state.records import loads
from .apply import State, apply_plan
from .events import Reporter
from .options import ApplyOptions
from .outcomes import RunReport, RunStatus

RESUMABLE = frozenset(
    {"awaiting_human", "awaiting_batch", "cancelled", "failed", "interrupted", "partial"}
)
POLL_S = 0.2


def resume_run(
    state: State, run_id: str, *, reporter: Reporter | None = None, jobs: int | None = None
) -> RunReport:
    """Continue run ``run_id`` (same id) with the pipeline file and params it was started with.

    Raises NotFound for an unknown run or a pipeline file that is gone, UsageError for a run
    that cannot be resumed (completed, rejected, running).
    """
    plan, options = resume_plan(state, run_id, jobs=jobs)
    return apply_plan(plan, state, options, reporter)


def resume_plan(state: State, run_id: str, *, jobs: int | None = None) -> tuple[Plan, ApplyOptions]:
    """The plan and options that continue run ``run_id`` (a console that has the plan before
    the run goes on prints its phases in pipeline order). Raises as ``resume_run``."""
    from ...pipeline.compiler import compile_pipeline

    run = state.journal.get_run(run_id)
    if run["status"] not in RESUMABLE:
        raise UsageError(
            f"run {run['id']} is {run['status']}; only "
            f"{', '.join(sorted(RESUMABLE))} runs can be resumed"
        )
    path = Path(run["pipeline_file"])
    if not path.is_file():
        raise NotFound(f"run {run['id']}: its pipeline file {path} no longer exists")
    params = loads(run["params"]) or {}
    plan = compile_pipeline(path, {k: json.dumps(v) for k, v in params.items()})
    options = ApplyOptions(item=run["item"], resume_run_id=run["id"], kind=run["kind"] or "run")
    if jobs:
        options.jobs = jobs
    return plan, options

    return True


def request_cancel(journal: Journal, run_id: str) -> dict[str, Any]:
    """Ask run ``run_id`` to stop. A running run sees the request within ~0.2 s, kills its
    in-flight work and ends ``cancelled``; a suspended run (or one whose process is gone) is
    marked cancelled here. Raises NotFound (unknown run), UsageError (already finished).
    """
    run = journal.get_run(run_id)
    rid, status = run["id"], run["status"]
    if status == "running" and process_alive(run["pid"]):
        journal.update_run(rid, cancel_requested=time.time())
        return {"run_id": rid, "status": "cancelling"}
    if status in ("running", "awaiting_human", "awaiting_batch"):
        cancelled = cancel_batches(journal, rid, Path(run["pipeline_file"]).parent)
        journal.conn.execute(
            "UPDATE executions SET status='cancelled' WHERE run_id=? AND "
            "status IN ('running','awaiting_human','awaiting_batch')",
            (rid,),
        )
        journal.update_run(
            rid,
            status=RunStatus.CANCELLED.value,
            finished_at=time.time(),
            exit_code=130,
            reason="cancelled with runner runs cancel",
            cancel_requested=time.time(),
        )
        return {
            "run_id": rid,
            "status": RunStatus.CANCELLED.value,
            **({"batches_cancelled": cancelled} if cancelled else {}),
        }
    raise UsageError(f"run {rid} is not running (status {status})")


def cancel_batches(journal: Journal, run_id: str, where: Path) -> int:
    """Cancel the provider batches run ``run_id`` has running (batch mode), with the providers
    configured for ``where`` (the pipeline's directory); how many were asked to cancel. What a
    cancelled batch finished is collected by a resume; the rest goes in a new batch."""
    import asyncio

    from ...providers.batchapi import batch_api_of
    from ...providers.config import load_access
    from ...state.batchbook import live_batches
    from .batchdesk import BatchDesk

    if not any(row["status"] == "submitted" for row in live_batches(journal, run_id)):
        return 0  # (no provider configured for nothing)
    access = load_access(where)

    def api(name: str) -> tuple[Any, Any]:
        provider = access.get(name)
        return provider, batch_api_of(provider)

    async def cancel() -> int:
        try:
            return await BatchDesk(journal, run_id).cancel(api)
        finally:
            await access.aclose()

    return asyncio.run(cancel())


def kept_work(journal: Journal, run_id: str) -> dict[str, int]:
    """What a run has done and keeps (completed or answered from the cache), counted as plan
    and apply count (surfaces/counts.py): steps, a for_each step by its elements."""
    rows = journal.query(
        "SELECT DISTINCT step_id, element FROM executions WHERE run_id=? "
        "AND status IN ('completed','cached')",
        (journal.rows_run(run_id),),
    )
    elements = sum(1 for r in rows if r["element"] is not None and int(r["element"]) >= 0)
    return {"steps": len(rows) - elements, "elements": elements}


def wait_for_end(journal: Journal, run_id: str, timeout: float) -> str:
    """The run's status once it is no longer running, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status = str(journal.get_run(run_id)["status"])
        if status != "running" or time.monotonic() >= deadline:
            return status
        time.sleep(POLL_S)


def event_json(row: dict[str, Any]) -> dict[str, Any]:
    """One journaled event as the JSON line ``runner runs events`` prints."""
    return {
        "seq": row["seq"],
        "type": row["type"],
        "run_id": row["run_id"],
        "step": row["step_id"],
        "element": row["element"],
        "ts": row["ts"],
        **(loads(row["data"]) or {}),
    }


def stream_events(
    journal: Journal, run_id: str, *, follow: bool = False, idle_timeout: float | None = None
) -> Iterator[dict[str, Any]]:
    """The run's events in order; with ``follow``, keep polling until the run finishes
    (a RunFinished event with the run no longer running) or ``idle_timeout`` passes."""
    run_id = journal.get_run(run_id)["id"]
    after = 0
    idle_since = time.monotonic()
    while True:
        rows = journal.events(run_id, after)
        for row in rows:
            after = row["seq"]
            yield event_json(row)
        if rows:
            idle_since = time.monotonic()
        if not follow:
            return
        status = journal.get_run(run_id)["status"]
        if status != "running" and not rows:
            return
        if idle_timeout is not None and time.monotonic() - idle_since > idle_timeout:
            return
        time.sleep(POLL_S)
