"""`runner iterate`: a child run that refines a picked (or given) iteration with a reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import expr as ex
from ..errors import InvalidPipeline, UsageError
from ..store.journal import Journal
from .records import Iteration, iterations_of, resolve_target


def find_source(
    journal: Journal, ident: str, *, from_picked: bool
) -> tuple[dict[str, Any], Iteration]:
    """The run and iteration to refine. Raises NotFound / UsageError (with a `runner pick` hint)."""
    run, it = resolve_target(journal, ident)
    if it is not None:
        if it.status != "completed" or not it.raw:
            raise UsageError(
                f"iteration {it.id} is {it.status}; only a completed one can be refined"
            )
        return run, it
    current: dict[str, Any] | None = run
    while current is not None:
        picked = [i for i in iterations_of(journal, current["id"]) if i.picked]
        if picked:
            return current, picked[0]
        if not from_picked or not current.get("parent_run_id"):
            break
        current = journal.get_run(current["parent_run_id"])
    raise UsageError(
        f"run {run['id']} has no picked iteration",
        hint=f"pick one first: runner pick {run['id']} <ordinal>  (or pass an iteration id)",
    )


def child_params(
    parent: dict[str, Any], *, n: int, prompt_append: str, variables: dict[str, Any], reference: str
) -> dict[str, Any]:
    params: dict[str, Any] = json.loads(parent["params"] or "{}")
    params.update(
        {
            "n": n,
            "prompt_append": prompt_append,
            "vars": variables,
            "reference": reference,
            "seed": 0,
        }
    )
    return params


def prerender(plan: Any) -> None:
    """Render every template step whose arguments depend on params only: a missing variable
    is a usage error (exit 2) before any run exists."""
    from ..steps.template import environment_for

    for sid in plan.order:
        step = plan.steps[sid]
        if step.uses != "template":
            continue
        if any(r.root != "params" for e in ex.iter_expressions(step.args) for r in e.refs):
            continue
        args = ex.evaluate_value(step.args, {"params": plan.params})
        try:
            ex.render_template(
                environment_for(plan.root),
                name=args.get("template"),
                text=args.get("text"),
                variables=dict(args.get("vars") or {}),
            )
        except InvalidPipeline as exc:
            raise UsageError(
                f"step '{sid}': {exc.message}", hint=exc.hint or "pass it with --var k=v"
            ) from None


def plan_child(
    parent: dict[str, Any], it: Iteration, *, n: int, prompt_append: str, variables: dict[str, Any]
) -> Any:
    from ..compiler import compile_pipeline

    path = Path(parent["pipeline_file"])
    params = child_params(
        parent, n=n, prompt_append=prompt_append, variables=variables, reference=it.raw or ""
    )
    plan = compile_pipeline(path, params=params)
    if "reference" not in plan.params or "prompt_append" not in plan.params:
        raise UsageError(
            f"pipeline {plan.name} does not take `reference` and `prompt_append` params",
            hint="iterate works on pipelines shaped like pipelines/thumbnail.yaml",
        )
    prerender(plan)
    return plan


def child_options(parent: dict[str, Any], it: Iteration, run_id: str | None = None) -> Any:
    """The apply options of a child run: kind iterate, the parent, its item, the reference."""
    from ..engine.interpreter import ApplyOptions
    from ..store.journal import dumps

    return ApplyOptions(
        kind="iterate",
        parent_run_id=parent["id"],
        item=parent["item"],
        reference_asset=dumps({"sha256": it.raw, "iteration_id": it.id}),
        run_id=run_id,
    )


def run_child(
    state: Any, plan: Any, options: Any, reporter: Any = None, *, as_json: bool = True
) -> dict[str, Any]:
    """Apply a child plan and record its iterations; the `runner iterate --json` document."""
    from ..engine.apply import apply_plan
    from .hooks import after_apply

    report = apply_plan(plan, state, options, reporter)
    doc: dict[str, Any] = report.to_json()
    doc.update(after_apply(plan, state, report, out_dir=None, as_json=as_json))
    return doc
