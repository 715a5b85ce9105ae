"""What the pages and the JSON API do, each as one function over an opened state directory.

Every function here calls the same library function the CLI command does (``runner pick`` ->
``thumbs.records.pick``, ``runner decide`` -> ``engine.gates.record_decision``...) and returns the
same JSON document the command prints with ``--json``. Request parsing errors are UsageErrors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...engine.run.apply import State
from ...errors import RunnerError, UsageError
from ...state.records import loads

RUN_KEYS = ("id", "pipeline", "item", "status", "kind", "created_at", "exit_code", "reason")
NO_PHASE = ""
Layout = tuple[str, str, str]  # (step id, phase, uses)
PENDING: dict[str, Any] = {
    "status": "pending",
    "elements": None,
    "element_statuses": None,
    "started_at": None,
    "finished_at": None,
    "duration_s": None,
    "attempts": 0,
    "error": None,
    "why": None,
    "output": None,
}
NOT_RUN: dict[str, Any] = {**PENDING, "status": "not run"}


class Conflict(Exception):
    """A library error that means "not now, the run is in the wrong state" (HTTP 409)."""

    def __init__(self, error: RunnerError) -> None:
        super().__init__(str(error))
        self.error = error


@contextmanager
def opened(state_dir: Path, *, readonly: bool = True) -> Iterator[State]:
    """A State for one request: SQLite connections are cheap and never shared across threads."""
    state = State.open(state_dir, readonly=readonly)
    try:
        yield state
    finally:
        state.close()


# -- reading ----------------------------------------------------------------------------------


def list_runs(
    state: State,
    *,
    pipeline: str | None,
    status: str | None,
    item: str | None,
    awaiting: bool,
    limit: int,
) -> dict[str, Any]:
    """`runner runs list --json` (with the same filters)."""
    from ...state.runfold import repeats

    rows = state.journal.list_runs(
        pipeline=pipeline, item=item, limit=limit, status="awaiting_human" if awaiting else status
    )
    of = repeats(state.journal, rows)
    runs = [{**{k: r[k] for k in RUN_KEYS}, "repeat_of": of[r["id"]]} for r in rows]
    return {"runs": runs, "exit_code": 0}


STATUS_WORDS = {
    "awaiting_human": "waiting for review",
    "awaiting_batch": "waiting for a batch",
    "not run": "not run",
}


def status_words(status: str | None) -> str:
    """A status as a person reads it: awaiting_human is 'waiting for review'."""
    if not status:
        return "?"
    return STATUS_WORDS.get(status, status.replace("_", " "))


def run_document(state: State, run_id: str) -> dict[str, Any]:
    """`runner runs show --json`, plus the steps grouped by phase, gate decisions and the last
    event's sequence number (where a live view starts streaming). Raises NotFound."""
    from ...engine.run.gates import decisions
    from ...review.thumbs.view import run_json

    doc = run_json(state, run_id)
    run = doc["run"]
    doc["phases"] = step_groups(state, run)
    doc["decisions"] = [r.to_json() for r in decisions(state.journal, run["id"])]
    row = state.journal.conn.execute(
        "SELECT MAX(seq) FROM events WHERE run_id=?", (run["id"],)
    ).fetchone()
    doc["last_event"] = int(row[0] or 0)
    # what the run's calls really cost (the page's Spent line: static/spend.js)
    from ...engine.plan.spendreport import run_spend_line

    doc["spend"] = run_spend_line(state.journal, state.dir, run["id"])
    doc["exit_code"] = 0
    return doc


def page_document(state: State, run_id: str) -> dict[str, Any]:
    """What the run page shows: the run, its iterations, steps by phase (without decoding each
    step's output: it loads when opened), decisions and the last event. Raises NotFound."""
    from ...engine.run.gates import decisions
    from ...review.runview import run_view
    from ...review.thumbs.view import reference_of
    from ...state.iterations import iterations_of

    view = run_view(state, run_id)
    run = {
        **view.run,
        "child_run_ids": view.children,
        "reference_asset": reference_of(view.run),
        "repeat_of": view.repeat_of,
    }
    row = state.journal.conn.execute(
        "SELECT MAX(seq) FROM events WHERE run_id=?", (run["id"],)
    ).fetchone()
    phases = step_groups(state, run, rows=view.executions, outputs=False)
    return {
        "run": run,
        "params": loads(run["params"]) if isinstance(run.get("params"), str) else run["params"],
        "span": run_span(run, phases),
        "iterations": [it.to_json() for it in iterations_of(state.journal, run["id"])],
        "phases": phases,
        "decisions": [gate_images(state, r.to_json()) for r in decisions(state.journal, run["id"])],
        "last_event": int(row[0] or 0),
        "iterate": iterate_explanation(state, run),
        "batches": batch_progress(view.batches),
    }


def batch_progress(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's provider batches as the page shows them: each as `runs show --json` gives it,
    with ``progress`` while it is live (``batch B: 812 of 1,000 done (in_progress), expires in
    19 h``, as last looked at; None once it is over)."""
    from ...engine.run.batchdesk import progress_of
    from ...review.runview import batch_json
    from ...state.batchbook import LIVE

    return [
        {**batch_json(r), "progress": progress_of(r) if r["status"] in LIVE else None}
        for r in rows
    ]


def gate_images(state: State, decision: dict[str, Any]) -> dict[str, Any]:
    """A pending gate's decision with ``images``: for each value it shows that is an image this
    state serves (a digest, or a list of them), the digests, so the panel shows the pictures."""
    summary = decision.get("summary") or {}
    show = summary.get("show") if decision.get("status") == "pending" else None
    images: dict[str, list[str]] = {}
    if isinstance(show, dict):
        for key, value in show.items():
            digests = value if isinstance(value, list) else [value]
            if (
                digests
                and len(digests) <= 64
                and all(isinstance(d, str) and image_object(state, d) is not None for d in digests)
            ):
                images[str(key)] = digests
    return {**decision, "images": images}


def run_span(run: Mapping[str, Any], phases: list[dict[str, Any]]) -> dict[str, float] | None:
    """The time a run's timeline spans: from its start to its last step's end (or now, while it
    runs); None before anything has a time."""
    import time

    start = run.get("created_at")
    ends = [s["finished_at"] for g in phases for s in g["steps"] if s.get("finished_at")]
    if run.get("finished_at"):
        ends.append(run["finished_at"])
    if run.get("status") == "running":
        ends.append(time.time())
    if not start or not ends:
        return None
    return {"start": float(start), "end": max(float(start) + 0.001, max(ends))}


def iterate_explanation(state: State, run: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a child run (`runner iterate`, or the page's iterate form): what `runner iterate`
    prints before it runs: the vars used (only those given), the parent's vars left out, and
    the first line of the prompt. None for other runs or when the pipeline cannot be compiled."""
    from ...review.thumbs.iterate import explain_child

    if run.get("kind") != "iterate" or not run.get("parent_run_id"):
        return None
    try:
        parent = state.journal.get_run(run["parent_run_id"])
    except RunnerError:
        return None
    plan, _error = run_plan(state, run)
    if plan is None:
        return None
    raw = parent["params"]
    try:
        info = explain_child(
            {**parent, "params": raw if isinstance(raw, str) else json.dumps(raw)}, plan
        )
    except RunnerError:
        return None
    info["left"] = {k: info["parent_vars"][k] for k in info["not_inherited"]}
    return info


def events(state: State, run_id: str, after: int) -> dict[str, Any]:
    """The run's journaled events after ``after``, as `runner runs events` prints them."""
    from ...engine.run.runctl import event_json

    rid = state.journal.get_run(run_id)["id"]
    return {
        "run_id": rid,
        "events": [event_json(r) for r in state.journal.events(rid, after)],
        "exit_code": 0,
    }


def collections(state_dir: Path, name: str | None, query: str, limit: int) -> dict[str, Any]:
    """The collections page: every collection with its count (`runner collections list`), and
    for ``name`` its documents (`collections show`) or, with ``query``, the documents that match
    it best first (`collections search`; a query it cannot read is said in ``error``).
    Raises NotFound for an unknown collection."""
    from ...errors import NotFound
    from ...state.collections import Collections

    doc: dict[str, Any] = {"collections": [], "name": name, "query": query, "error": None}
    if not (state_dir / "collections.db").is_file():  # nothing ingested yet: make no file
        if name is not None:
            raise NotFound(f"unknown collection '{name}'", hint="no collection exists yet")
        return doc
    with Collections(state_dir) as cols:
        doc["collections"] = cols.names_and_counts()
        if name is None:
            return doc
        cols.require(name)
        doc["count"] = cols.count(name)
        if query.strip():
            try:
                doc["hits"] = cols.search(name, query, limit)
            except UsageError as exc:
                doc["hits"], doc["error"] = [], exc.message
        else:
            doc["documents"] = cols.documents(name, limit)
    return doc


def step_types() -> dict[str, Any]:
    """`runner steps --json`."""
    from ...steps.registry import default_registry, describe

    reg = default_registry()
    out = []
    for name in reg.names():
        t = reg.get(name)
        if t is None:
            continue
        out.append(describe(name, t))
    return {"steps": out, "exit_code": 0}


def providers() -> dict[str, Any]:
    """`runner providers --json`."""
    from ...providers.health import report

    return report(Path.cwd())


def image_object(state: State, digest: str) -> Path | None:
    """The stored file of an image some iteration refers to; None for any other digest.

    Only iteration assets are served: the store also holds decisions and step outputs.
    """
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return None
    rows = state.journal.query(
        "SELECT 1 FROM iterations WHERE raw=? OR final=? LIMIT 1", (digest, digest)
    )
    if not rows:  # an image generated a moment ago, before its run recorded iterations
        rows = state.journal.query(
            "SELECT 1 FROM calls WHERE status='completed' AND json_extract(result, '$.digest')=? "
            "LIMIT 1",
            (digest,),
        )
    if not rows or not state.objects.has(digest):
        return None
    path: Path = state.objects.path(digest)
    return path


def live_tiles(state: State, run_id: str) -> dict[str, Any]:
    """The images of a run's image steps as their provider calls finish (before the run
    records its iterations): ordinal, status, seed and the raw image's digest, with a count."""
    run = state.journal.get_run(run_id)
    rows = state.journal.query(
        "SELECT status, meta, result, error FROM calls WHERE run_id=? ORDER BY started_at",
        (run["id"],),
    )
    tiles = []
    for r in rows:
        meta = loads(r["meta"]) or {}
        if "ordinal" not in meta:
            continue  # not an image call
        result = loads(r["result"]) or {}
        tiles.append(
            {
                "ordinal": meta["ordinal"],
                "step": meta.get("step"),
                "seed": meta.get("seed"),
                "status": r["status"],
                "digest": result.get("digest"),
                "error": r["error"],
            }
        )
    tiles.sort(key=lambda t: t["ordinal"])
    done = sum(t["status"] == "completed" for t in tiles)
    return {
        "run_id": run["id"],
        "status": run["status"],
        "expected": len(tiles),
        "done": done,
        "tiles": tiles,
        "exit_code": 0,
    }


# -- the steps of a run, grouped by phase -----------------------------------------------------


@lru_cache(maxsize=64)
def _plan(path: str, signature: tuple[int, int, int, int], params: str) -> Any:
    # Compiling is the slow part of a run view; a pipeline file only changes with its
    # signature (ctime included: a same-size rewrite may have had its mtime set back).
    from ...pipeline.compiler import compile_pipeline

    return compile_pipeline(Path(path), params=json.loads(params))


def pipeline_file(state: State, run: Mapping[str, Any]) -> Path:
    """The run's pipeline file. The journal keeps it as given to `apply`, which may be relative
    to that command's working directory; the project root (beside the state dir) is tried too."""
    path = Path(run.get("pipeline_file") or "")
    if path.is_absolute() or path.is_file():
        return path
    beside = state.dir.parent / path
    return beside if beside.is_file() else path


def run_plan(state: State, run: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(the compiled plan the run was started from, None) or (None, why it cannot be had)."""
    path = pipeline_file(state, run)
    try:
        stat = path.stat()
    except OSError:
        return None, f"pipeline file {path} is not readable"
    params = run["params"] if isinstance(run["params"], dict) else (loads(run["params"]) or {})
    try:
        signature = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        return _plan(str(path.resolve()), signature, json.dumps(params, sort_keys=True)), None
    except RunnerError as exc:
        return None, exc.message


def pipeline_layout(
    state: State, run: Mapping[str, Any]
) -> tuple[list[str], list[Layout], str | None]:
    """(phases, [(step, phase, uses)], error) of the pipeline a run was started from."""
    plan, error = run_plan(state, run)
    if plan is None:
        return [], [], error
    steps = [(sid, plan.steps[sid].phase or NO_PHASE, plan.steps[sid].uses) for sid in plan.order]
    return list(plan.phases), steps, None


def run_graph(state: State, run_id: str) -> dict[str, Any]:
    """The run's DAG, from the same graph `runner graph` draws, with each step's status now.

    Raises NotFound for an unknown run; ``graph`` is None when the pipeline cannot be compiled.
    """
    from ...pipeline.graphview import graph_json

    run = state.journal.get_run(run_id)
    plan, error = run_plan(state, run)
    steps = [s for g in step_groups(state, run, outputs=False) for s in g["steps"]]
    graph = None if plan is None else graph_json(plan, state.journal.workers(run["id"]))
    return {
        "run_id": run["id"],
        "status": run["status"],
        "graph": graph,
        "statuses": {s["id"]: s["status"] for s in steps},
        # a for_each's element count in this run, and how its elements ended (what "mixed" is)
        "counts": {s["id"]: s["elements"] for s in steps if s.get("elements") is not None},
        "elements": {s["id"]: s["element_statuses"] for s in steps if s.get("element_statuses")},
        "error": error,
        "exit_code": 0,
    }


def _summary(rows: list[dict[str, Any]], outputs: bool = True) -> dict[str, Any]:
    """One step's state from its executions in this run (the newest attempt per element)."""
    latest: dict[int, dict[str, Any]] = {}
    for r in rows:
        latest[r["element"] if r["element"] is not None else -1] = r
    last = list(latest.values())
    statuses = sorted({r["status"] for r in last})
    started = [r["started_at"] for r in last if r["started_at"]]
    finished = [r["finished_at"] for r in last if r["finished_at"]]
    errors = [r["error"] for r in last if r["error"]]
    single = len(last) == 1 and -1 in latest
    workers: dict[str, int] = {}  # where the bodies ran (a dask run): address -> executions
    for r in last:
        if r.get("worker"):
            workers[r["worker"]] = workers.get(r["worker"], 0) + 1
    return {
        "status": statuses[0] if len(statuses) == 1 else "mixed",
        "elements": None if single else len(last),
        "element_statuses": None
        if single
        else {s: sum(r["status"] == s for r in last) for s in statuses},
        "started_at": min(started) if started else None,
        "finished_at": max(finished) if finished else None,
        "duration_s": sum(r["duration_s"] or 0.0 for r in last) if last else None,
        "attempts": max((r["attempts"] or 0) for r in last) if last else 0,
        "error": errors[0] if errors else None,
        "why": last[-1].get("why") if last else None,
        "workers": workers or None,
        "output": (loads(last[-1]["output"]) if outputs else True)
        if single and last[-1]["output"]
        else None,
    }


def step_groups(
    state: State,
    run: Mapping[str, Any],
    *,
    rows: list[dict[str, Any]] | None = None,
    outputs: bool = True,
) -> list[dict[str, Any]]:
    """The run's steps grouped by phase, in pipeline order, each with its stored state.

    ``rows`` are the run's executions when the caller has them; without ``outputs`` a step's
    output is only marked present (True), not decoded.
    """
    phases, layout, error = pipeline_layout(state, run)
    by_step: dict[str, list[dict[str, Any]]] = {}
    for row in state.journal.executions(run["id"]) if rows is None else rows:
        by_step.setdefault(row["step_id"], []).append(row)
    groups: dict[str, list[dict[str, Any]]] = {p: [] for p in phases}
    known = set()
    # A step with no execution in a run that stopped will not run in it: say so, not "pending".
    absent = PENDING if run["status"] in ("running", "awaiting_human") else NOT_RUN
    for sid, phase, uses in layout:
        known.add(sid)
        rows = by_step.get(sid, [])
        step = {"id": sid, "uses": uses, **(_summary(rows, outputs) if rows else absent)}
        groups.setdefault(phase, []).append(step)
    for sid, rows in by_step.items():
        if sid not in known:  # the pipeline file changed since, or could not be compiled
            groups.setdefault(NO_PHASE, []).append(
                {"id": sid, "uses": None, **_summary(rows, outputs)}
            )
    out = [{"phase": p or None, "steps": s} for p, s in groups.items() if s or p in phases]
    if error:
        out.append({"phase": None, "steps": [], "error": error})
    return out


# -- request bodies -----------------------------------------------------------------------------


def body_str(
    body: Mapping[str, Any], key: str, *, default: str | None = None, required: bool = False
) -> str | None:
    value = body.get(key, default)
    if value is None:
        if required:
            raise UsageError(f"request field '{key}' is required")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise UsageError(f"request field '{key}' must be a string")
    text = str(value)
    if "\x00" in text:
        raise UsageError(f"request field '{key}' contains a NUL character")
    return text


def body_bool(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise UsageError(f"request field '{key}' must be true or false")
    return value


def body_object(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key) or {}
    if not isinstance(value, dict):
        raise UsageError(f"request field '{key}' must be a JSON object")
    return value


# -- changing ---------------------------------------------------------------------------------


def pick(state: State, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """`runner pick RUN WHICH --json`. Raises NotFound / UsageError as the command does."""
    from ...state.iterations import pick as do_pick

    which = body_str(body, "which", required=True) or ""
    it = do_pick(state.journal, run_id, which)
    return {"run_id": it.run_id, "picked": {"id": it.id, "ordinal": it.ordinal}, "exit_code": 0}


def decide(state: State, run_id: str, gate: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """`runner decide RUN GATE DECISION --json`; a run that is not waiting is a Conflict."""
    from ...engine.run.gates import Decision, record_decision

    raw = body_str(body, "decision", required=True)
    try:
        decision = Decision(raw)
    except ValueError:
        raise UsageError(f"decision must be one of approve, reject, revise (got '{raw}')") from None
    values = body_object(body, "input")
    try:
        row = record_decision(
            state.journal,
            state.objects,
            run_id,
            gate,
            decision,
            input=values,
            by=body_str(body, "by") or None,
            comment=body_str(body, "comment") or None,
        )
    except UsageError as exc:  # not waiting, or already decided: the run's state, not the request
        raise Conflict(exc) from None
    return {
        "run_id": row.run_id,
        "decision": row.to_json(),
        "message": decision_message(state, row.run_id, gate, decision.value, row),
        "exit_code": 0,
    }


def decision_message(state: State, run_id: str, gate: str, decision: str, row: Any) -> str:
    """What a decision does to the run, in words, naming the steps it lets run or stops."""
    plan, _error = run_plan(state, state.journal.get_run(run_id))
    after: list[str] = []
    if plan is not None and gate in plan.steps:
        after = [s for s in plan.order if s in plan.downstream({gate}) and s != gate]
    listed = ", ".join(after[:6]) + (" ..." if len(after) > 6 else "")
    if decision == "approve":
        return f"the run continues past '{gate}'" + (f" ({listed})." if after else ".")
    if decision == "reject":
        return "the run ends rejected; nothing after it runs" + (f" ({listed})." if after else ".")
    target = (row.summary or {}).get("revise")
    return (
        f"'{target}' runs again with your input" if target else "the gate's step runs again"
    ) + f", then '{gate}' asks again (round {row.round + 1})."


def step_output(state: State, run_id: str, step: str) -> dict[str, Any]:
    """One step's stored output in a run (the run page loads outputs only when opened).

    Raises NotFound for an unknown run or a step that has no execution in it.
    """
    from ...errors import NotFound

    run = state.journal.get_run(run_id)
    rows = [r for r in state.journal.executions(run["id"]) if r["step_id"] == step]
    if not rows:
        raise NotFound(f"run {run['id']} has no step '{step}'")
    summary = _summary(rows)
    return {"run_id": run["id"], "step": step, "output": summary["output"], "exit_code": 0}
