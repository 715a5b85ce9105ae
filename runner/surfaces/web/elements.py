"""One step of a run, element by element, as a reviewer reads it.

For each element of a step (one for a plain step, one per item for a for_each): its input (the
item), the arguments it ran with (for an llm step, the rendered prompt), its output (the model's
reply, a card...), its checks' verdicts and retries (from the journaled events), attempts and
errors. A card step adds its hash, the prompt block it produces and, when the card changed since
the previous run of the same pipeline and item, which fields changed with old and new values.

Arguments and items are not journaled (only their hashes are): they are evaluated again from the
pipeline and the outputs this run stored, which is what the step saw unless the pipeline file
changed since (then ``pipeline_changed`` is set).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ... import expr as ex
from ...errors import NotFound, RunnerError
from ...state.records import loads

MAX_ELEMENTS = 500  # the largest page one request may ask for (the page asks for 100)


def _latest(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        out[r["element"] if r["element"] is not None else -1] = r
    return out


def _context(state: Any, run: Mapping[str, Any], plan: Any) -> dict[str, Any]:
    """``steps.X.output`` / ``steps.X.elements[i].output`` as this run stored them."""
    by_step: dict[str, dict[int, dict[str, Any]]] = {}
    for r in state.journal.executions(run["id"]):
        by_step.setdefault(r["step_id"], {})[r["element"] if r["element"] is not None else -1] = r
    steps: dict[str, Any] = {}
    for sid, rows in by_step.items():
        if -1 in rows and len(rows) == 1:
            steps[sid] = {"output": loads(rows[-1]["output"]) if rows[-1]["output"] else None}
        else:
            outs = [
                loads(rows[i]["output"]) if rows[i]["output"] else None
                for i in sorted(k for k in rows if k >= 0)
            ]
            steps[sid] = {"output": outs, "elements": [{"output": o} for o in outs]}
    params = run["params"] if isinstance(run["params"], dict) else (loads(run["params"]) or {})
    return {"params": {**plan.params, **params}, "steps": steps, "run": {"id": run["id"]}}


def _evaluate(compiled: Any, context: Mapping[str, Any]) -> tuple[Any, str | None]:
    try:
        return ex.evaluate_value(compiled, context), None
    except RunnerError as exc:
        return None, exc.message
    except Exception as exc:  # data the step never saw this way (the pipeline changed)
        return None, f"{type(exc).__name__}: {exc}"


def _verdicts(state: Any, run_id: str, step: str) -> dict[int, list[dict[str, Any]]]:
    """Per element, the retry and failure events: each failed check's reason, by attempt."""
    out: dict[int, list[dict[str, Any]]] = {}
    rows = state.journal.query(
        "SELECT type, element, data FROM events WHERE run_id=? AND step_id=? "
        "AND type IN ('StepRetrying', 'StepFailed', 'StepPassed') ORDER BY seq",
        (run_id, step),
    )
    for r in rows:
        data = loads(r["data"]) or {}
        el = r["element"] if r["element"] is not None else -1
        verdict = "passed" if r["type"] == "StepPassed" else "failed"
        entry = {"attempt": data.get("attempt") or data.get("attempts"), "verdict": verdict}
        if data.get("reason"):
            entry["reason"] = data["reason"]
        out.setdefault(el, []).append(entry)
    return out


def _previous_card(
    state: Any, run: Mapping[str, Any], step: str, element: int
) -> dict[str, Any] | None:
    """The card this step built for the same element in the previous run of this pipeline/item."""
    rows = state.journal.query(
        "SELECT e.output FROM executions e JOIN runs r ON r.id = e.run_id "
        "WHERE r.pipeline=? AND COALESCE(r.item, '')=COALESCE(?, '') AND r.created_at < ? "
        "AND e.step_id=? AND e.element=? AND e.status='completed' AND e.output IS NOT NULL "
        "ORDER BY r.created_at DESC, e.id DESC LIMIT 1",
        (run["pipeline"], run["item"], run["created_at"], step, element),
    )
    if not rows:
        return None
    value = loads(rows[0]["output"])
    return value if isinstance(value, dict) and "card" in value else None


def _get(value: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def card_view(
    state: Any, run: Mapping[str, Any], plan: Any, step: str, element: int, output: Any
) -> dict[str, Any] | None:
    """A card element: the card, its hash, its prompt block, and its drift since the last run."""
    if not isinstance(output, dict) or "card" not in output:
        return None
    from ...steps.cards import card_block

    view: dict[str, Any] = {"hash": output.get("hash"), "card": output["card"]}
    try:
        view["block"] = card_block(output)
    except (RunnerError, ValueError, TypeError) as exc:
        view["block"] = None
        view["block_error"] = str(exc)
    before = _previous_card(state, run, step, element)
    view["previous_hash"] = before.get("hash") if before else None
    view["drift"] = None
    if before is not None and before.get("hash") != output.get("hash"):
        view["drift"] = _changes(plan, step, before["card"], output["card"])
    return view


def _changes(plan: Any, step: str, old: Any, new: Any) -> list[dict[str, Any]]:
    fields: list[str] = []
    try:
        from ...steps.card import spec_at
        from ...steps.cards.drift import changed_fields

        args = plan.steps[step].args
        spec_name = args.get("spec") if isinstance(args, dict) else None
        if isinstance(spec_name, str):
            fields = changed_fields(spec_at(plan.root, spec_name), old, new)
    except (RunnerError, KeyError, OSError):
        fields = []
    if not fields:  # no spec to ask: compare the card's top-level groups
        keys = (
            sorted(set(old) | set(new)) if isinstance(old, dict) and isinstance(new, dict) else []
        )
        fields = [k for k in keys if old.get(k) != new.get(k)]
    return [{"field": f, "old": _get(old, f), "new": _get(new, f)} for f in fields]


def _matches(query: str, el: int, label: str | None, status: str) -> bool:
    """An element found by a search: its label, its #index or its status holds the words."""
    text = f"#{el} {label or ''} {status}".casefold()
    return all(word in text for word in query.casefold().split())


def step_elements(
    state: Any,
    run_id: str,
    step: str,
    *,
    offset: int = 0,
    limit: int = MAX_ELEMENTS,
    query: str = "",
) -> dict[str, Any]:
    """Every element of ``step`` in run ``run_id`` (see the module docstring), or those whose
    label, index or status hold every word of ``query``; each named by its label.

    Raises NotFound for an unknown run or a step that has no execution in it.
    """
    from ...pipeline.labels import as_label, default_label
    from .service import run_plan

    run = state.journal.get_run(run_id)
    rows = [r for r in state.journal.executions(run["id"]) if r["step_id"] == step]
    if not rows:
        raise NotFound(f"run {run['id']} has no step '{step}'")
    latest = _latest(rows)
    plan, error = run_plan(state, run)
    compiled = plan.steps.get(step) if plan is not None else None
    context = _context(state, run, plan) if compiled is not None else {}
    items: list[Any] | None = None
    items_error = None
    if compiled is not None and compiled.for_each is not None:
        value, items_error = _evaluate(compiled.for_each, context)
        items = value if isinstance(value, list) else None
    verdicts = _verdicts(state, run["id"], step)
    from ...state.labels import of_run

    # as the run named its elements (journaled); a run from before labels were journaled
    # (migration 12) is named by evaluating the pipeline as it is now
    journaled = of_run(state.journal, run["id"], step).get(step, {})
    labels: dict[int, str | None] = {}
    for el in latest:
        if el in journaled:
            labels[el] = journaled[el]
            continue
        item = items[el] if items is not None and 0 <= el < len(items) else None
        label = None
        if item is not None and compiled is not None and compiled.label is not None:
            value, _err = _evaluate(compiled.label, {**context, "item": item, "index": el})
            label = as_label(value)
        labels[el] = label if label is not None else default_label(item)
    keys = sorted(latest)
    total = len(keys)
    if query.strip():
        keys = [k for k in keys if _matches(query, k, labels[k], latest[k]["status"])]
    times = [r for r in latest.values() if r.get("started_at")]
    span = None
    if times:
        start = min(r["started_at"] for r in times)
        end = max(r.get("finished_at") or r["started_at"] for r in times)
        span = {"start": start, "end": max(end, start + 0.001)}
    out = []
    for el in keys[offset : offset + limit]:
        r = latest[el]
        output = loads(r["output"]) if r["output"] else None
        entry: dict[str, Any] = {
            "element": None if el == -1 else el,
            "status": r["status"],
            "attempts": r["attempts"],
            "label": labels.get(el),
            "duration_s": r["duration_s"],
            "started_at": r.get("started_at"),
            "finished_at": r.get("finished_at"),
            "error": r["error"],
            "why": r.get("why"),
            "worker": r.get("worker"),  # the Dask worker that ran it (None: the coordinator)
            "output": output,
            "report": loads(r["report"]) if r.get("report") else None,
            "verdicts": verdicts.get(el, []),
        }
        if compiled is not None:
            ctx = dict(context)
            if el >= 0 and items is not None and el < len(items):
                ctx.update(item=items[el], index=el)
                entry["input"] = items[el]
            args, arg_error = _evaluate(compiled.args, ctx)
            entry["arguments"] = args
            if arg_error:
                entry["arguments_error"] = arg_error
            if compiled.uses == "card":
                entry["card"] = card_view(state, run, plan, step, max(el, -1), output)
        out.append(entry)
    return {
        "run_id": run["id"],
        "step": step,
        "uses": compiled.uses if compiled is not None else None,
        "for_each": bool(compiled is not None and compiled.for_each is not None),
        "total": len(keys),
        "all": total,  # before the search
        "query": query,
        "span": span,
        "offset": offset,
        # where the next page starts (the page asks for it as the list scrolls), None at the end
        "next_offset": offset + len(out) if offset + len(out) < len(keys) else None,
        "elements": out,
        "items_error": items_error,
        "pipeline_error": error,
        "exit_code": 0,
    }


def as_text(value: Any) -> str:
    """How a value reads on the page: text as is, anything else as indented JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)
