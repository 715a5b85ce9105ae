"""Thin adapters for `export` and `iterate`, whose composition lives in the CLI callbacks today.

``runner export`` and ``runner iterate`` assemble library calls inside their click callbacks
(runner/surfaces/cli/commands_thumb.py). These functions make the same calls in the same order,
with the same messages, so the web page behaves like the commands. They should become library
functions (e.g. ``thumbs.hooks.export_run`` / ``thumbs.iterate.run_child``) that both call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...engine.run.apply import State
from ...errors import RunnerError, StoreError, UsageError
from .responses import Forbidden
from .security import export_destination
from .service import body_bool, body_object, body_str, pipeline_file


def export(
    state: State, run_id: str, body: Mapping[str, Any], *, cwd: Path, roots: Iterable[Path]
) -> dict[str, Any]:
    """`runner export TARGET --to DIR [--raw] --json`; TARGET is the run or one iteration of it.

    A relative folder is taken from ``cwd`` (the server's working directory, as for the CLI);
    it must lie inside ``roots`` (security.export_destination). A folder that cannot be written
    is a 403 naming it as given, not a 500 with the server's paths.
    """
    from ...review.thumbs.hooks import export_run

    dest_text = body_str(body, "to", required=True) or ""
    if not dest_text.strip():
        raise UsageError("request field 'to' must name a folder")
    raw = body_bool(body, "raw")
    which = body_str(body, "iteration")
    run = state.journal.get_run(run_id)
    target = run["id"] if which is None else _iteration_ident(state, run, which)
    dest = export_destination(dest_text, base=cwd, roots=roots)
    try:
        return export_run(
            state,
            target,
            dest,
            raw=raw,
            picked=body_bool(body, "picked"),
            overwrite=body_bool(body, "overwrite"),
        )
    except (StoreError, OSError):
        raise Forbidden(
            f"cannot write to export folder '{dest_text}'",
            hint="choose a folder this server's user may write",
        ) from None


def _iteration_ident(state: State, run: Mapping[str, Any], which: str) -> str:
    """An ordinal or iteration id of ``run`` -> the iteration id. Raises NotFound (as pick)."""
    from ...errors import NotFound
    from ...state.iterations import iterations_of

    its = iterations_of(state.journal, run["id"])
    for it in its:
        # ASCII digits only, and few: int('²') and int('9' * 5000) raise.
        ordinal = int(which) if which.isascii() and which.isdigit() and len(which) < 12 else -1
        if which == it.id or ordinal == it.ordinal:
            return it.id
    known = ", ".join(str(i.ordinal) for i in its) or "none"
    raise NotFound(f"run {run['id']} has no iteration '{which}' (ordinals: {known})")


@dataclass
class Job:
    """A child run applied in a background thread of the server."""

    run_id: str
    thread: threading.Thread
    error: RunnerError | None = None
    result: dict[str, Any] = field(default_factory=dict)


class Jobs:
    """The runs this server started; the event stream waits for a job to finish recording."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def add(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.run_id] = job

    def get(self, run_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(run_id)

    def busy(self, run_id: str) -> bool:
        job = self.get(run_id)
        return job is not None and job.thread.is_alive()

    def join_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [j.thread for j in self._jobs.values()]
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _child_n(body: Mapping[str, Any]) -> int:
    n = body.get("n", 4)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 32:
        raise UsageError("request field 'n' must be an integer from 1 to 32")
    return n


def iterate(
    state_dir: Path, state: State, run_id: str, body: Mapping[str, Any], jobs: Jobs
) -> dict[str, Any]:
    """`runner iterate`: start a child run refining an iteration (or the picked one).

    With ``wait`` the child runs to the end and the result is what ``runner iterate --json``
    prints; without it the child runs in a background thread and its id is returned at once.
    Raises NotFound / UsageError before any run exists, as the command does.
    """
    from ...engine.run.recorder import new_run_id
    from ...review.thumbs.iterate import child_options, explain_child, find_source, plan_child

    n = _child_n(body)
    prompt_append = body_str(body, "prompt_append", default="") or ""
    variables = body_object(body, "vars")
    which = body_str(body, "iteration")
    run = state.journal.get_run(run_id)
    ident = run["id"] if which is None else _iteration_ident(state, run, which)
    parent, it = find_source(state.journal, ident, from_picked=body_bool(body, "from_picked"))
    # The journal keeps the file as `apply` was given it (maybe relative to another cwd).
    parent = {**parent, "pipeline_file": str(pipeline_file(state, parent))}
    plan = plan_child(parent, it, n=n, prompt_append=prompt_append, variables=variables)
    options = child_options(parent, it, run_id=new_run_id())
    job = Job(options.run_id or "", threading.Thread(target=lambda: None))
    job.thread = threading.Thread(
        target=_run_child,
        args=(state_dir, plan, options, job),
        name=f"runner-iterate-{job.run_id}",
        daemon=True,
    )
    jobs.add(job)
    job.thread.start()
    if body_bool(body, "wait"):
        job.thread.join()
    else:
        _wait_started(state, job)
    if job.error is not None:
        raise job.error
    # what `runner iterate` prints before the child runs (and its --json `iterate`)
    info = explain_child(parent, plan)
    if job.result:
        return {**job.result, "iterate": info}
    return {
        "run_id": job.run_id,
        "parent_run_id": parent["id"],
        "iteration_id": it.id,
        "status": "running",
        "iterate": info,
        "exit_code": 0,
    }


def _run_child(state_dir: Path, plan: Any, options: Any, job: Job) -> None:
    from ...review.thumbs.iterate import run_child

    state = State.open(state_dir)
    try:
        job.result = run_child(state, plan, options)
    except RunnerError as exc:
        job.error = exc
    finally:
        state.close()


def _wait_started(state: State, job: Job, timeout: float = 10.0) -> None:
    """Until the child's run row exists (so the page can show it) or the thread has failed."""
    deadline = time.monotonic() + timeout
    while job.thread.is_alive() and time.monotonic() < deadline:
        if state.journal.query("SELECT 1 FROM runs WHERE id=?", (job.run_id,)):
            return
        time.sleep(0.02)


def resume_in_background(state_dir: Path, run_id: str, jobs: Jobs) -> bool:
    """Continue a decided run in a server thread (`runner resume`); False if one already runs."""
    if jobs.busy(run_id):
        return False
    job = Job(run_id, threading.Thread(target=lambda: None))
    job.thread = threading.Thread(
        target=_resume, args=(state_dir, job), name=f"runner-resume-{run_id}", daemon=True
    )
    jobs.add(job)
    job.thread.start()
    return True


def _resume(state_dir: Path, job: Job) -> None:
    from ...engine.run.runctl import resume_run

    state = State.open(state_dir)
    try:
        report = resume_run(state, job.run_id)
        job.result = report.to_json()
    except RunnerError as exc:
        job.error = exc
    finally:
        state.close()
