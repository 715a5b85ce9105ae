"""`runner iterate`: a child run that refines a picked (or given) iteration with a reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ... import expr as ex
from ...errors import InvalidPipeline, UsageError
from ...state.iterations import Iteration, iterations_of, resolve_target
from ...state.journal import Journal


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
    from ...steps.template import environment_for

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


def explain_child(parent: dict[str, Any], plan: Any) -> dict[str, Any]:
    """What the child's prompt is made of: only ``--var`` values are used (nothing is inherited
    from the parent), so the parent's variables that were left out are named; the prompt the
    child will send (its template with the vars, then --prompt-append after a blank line), and
    the --var values that template does not read (they change nothing)."""
    parent_vars = (json.loads(parent["params"] or "{}") or {}).get("vars") or {}
    child_vars = plan.params.get("vars") or {}
    text: str | None = None
    unread: list[str] = []
    for sid in plan.order:
        step = plan.steps[sid]
        if step.uses == "template":
            text = _render_known(plan, step)
            if text is not None:
                unread = [k for k in child_vars if _render_without(plan, step, k) == text]
                break
    append = str(plan.params.get("prompt_append") or "")
    # as pipelines/thumbnail.yaml joins them: the text trimmed, one blank line, the append
    prompt = (text or "").strip()
    if append:
        prompt = f"{prompt}\n\n{append}" if prompt else append
    first = next((line for line in (text or "").splitlines() if line.strip()), "")
    return {
        "vars": child_vars,
        "parent_vars": parent_vars,
        "not_inherited": sorted(k for k in parent_vars if k not in child_vars),
        "unread_vars": unread,
        "prompt_append": append,
        "prompt": prompt if text is not None or append else None,
        "prompt_first_line": first,
    }


def _render_without(plan: Any, step: Any, var: str) -> str | None:
    """The step's text with ``var`` left out of params.vars (equal text: the template does not
    read it); None when it cannot be rendered that way."""
    vars_ = {k: v for k, v in (plan.params.get("vars") or {}).items() if k != var}
    shadow = type("Shadow", (), {"params": {**plan.params, "vars": vars_}, "root": plan.root})
    try:
        return _render_known(shadow, step)
    except Exception:  # a var the template needs: it is read
        return None


def _render_known(plan: Any, step: Any) -> str | None:
    """The step's text when its arguments depend on params only (prerender checked it)."""
    from ...steps.template import environment_for

    if any(r.root != "params" for e in ex.iter_expressions(step.args) for r in e.refs):
        return None
    args = ex.evaluate_value(step.args, {"params": plan.params})
    text: str = ex.render_template(
        environment_for(plan.root),
        name=args.get("template"),
        text=args.get("text"),
        variables=dict(args.get("vars") or {}),
    )
    return text


def flat_vars(values: dict[str, Any]) -> str:
    """``k="v", n=2``: template vars on one line, as `--var` would take them."""
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items())


def explain_lines(info: dict[str, Any]) -> list[str]:
    """The explanation as text (printed before the child runs)."""
    flat = flat_vars
    lines = [f"vars used (only --var): {flat(info['vars']) or 'none'}"]
    if info.get("unread_vars"):
        lines.append(
            "  not read by the template (they change nothing): "
            + ", ".join(info["unread_vars"])
        )
    if info["not_inherited"]:
        left = {k: info["parent_vars"][k] for k in info["not_inherited"]}
        lines.append(f"parent vars not used: {flat(left)}  (pass them with --var to keep them)")
    if info.get("prompt_append"):
        lines.append(f"--prompt-append: {info['prompt_append']}")
    if info.get("prompt"):
        lines.append("prompt (as sent, with the reference image):")
        lines.extend(f"  {line}" if line else "" for line in info["prompt"].splitlines())
    return lines


def plan_child(
    parent: dict[str, Any], it: Iteration, *, n: int, prompt_append: str, variables: dict[str, Any]
) -> Any:
    from ...pipeline.compiler import compile_pipeline

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
    from ...engine.run.options import ApplyOptions
    from ...state.records import dumps

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
    from ...engine.run.apply import apply_plan
    from .hooks import after_apply

    report = apply_plan(plan, state, options, reporter)
    doc: dict[str, Any] = report.to_json()
    doc.update(after_apply(plan, state, report, out_dir=None, as_json=as_json))
    return doc
