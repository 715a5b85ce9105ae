"""`runner plan` (and `apply --dry-run`, the same thing) and `runner explain`, its per-step view."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...engine.plan.plandoc import plan_document
from .base import (
    cli,
    emit_json,
    json_option,
    max_cost_option,
    param_option,
    parse_params,
    pipeline_arg,
    reask_option,
    retry_uncertain_option,
    state_option,
)
from .termtext import echo, echo_block

CHANGES_EXIT = 10  # --detailed-exitcode: the apply would do something (terraform uses 2; ours
# is taken by "invalid pipeline")


def render_plan(doc: dict[str, Any], fc: Any, *, verbose: bool) -> None:
    from ...engine.plan.forecast import iter_lines

    for line in iter_lines(fc, verbose=verbose):
        echo(line)
    from ...expr.commandscope import confinement_lines

    for line in confinement_lines(doc["steps"]):
        echo(line)
    from ..counts import plan_line

    echo(plan_line(doc))  # in the words apply's summary line uses (surfaces/counts.py)
    for line in cost_lines(doc["cost"]):
        echo(line)
    budget = doc.get("budget")
    if budget:
        verdict = "OVER" if budget["over"] else "within"
        echo(f"budget: {verdict} {budget['limit']:g} ({budget['source']})")
    if not doc["would_change"]:
        echo("nothing would run: the apply would only confirm the cached results")
    for path in doc.get("run_folder_edits") or []:
        from ...source.termtext import shown_path

        echo(
            f"note: {shown_path(Path(path))} was edited by hand; the store keeps the recorded "
            "final (runner verify lists it; delete the file to take the original back)"
        )


def cost_lines(cost: dict[str, Any]) -> list[str]:
    """The plan's provider calls and their cost, each with its currency; a call runner.toml
    has no price for says so rather than counting as 0."""
    currency = cost["currency"]
    unit = f" {currency}" if currency else ""
    out = []
    for line in cost["calls"]:
        if line.get("free"):
            price = "free"
        elif line["cost"] is None:
            where = f"runner.toml [prices.{line['provider']}]"
            price = f"no price known ({where} has no {line['kind']} price)"
        else:
            price = f"{line['cost']:.4g}{unit}"
        model = f" {line['model']}" if line["model"] else ""
        approx = "" if line["exact"] else " (a prompt is not known yet: tokens assumed)"
        what = f"{line['calls']} {line['kind']} to {line['provider']}{model}"
        if line.get("waiting"):  # in a batch already sent: an apply collects it
            what += f" in batch {line['waiting']} (waiting)"
            price = "no new cost"
        elif line.get("batch"):  # batch mode: the batch price, and the run waits for the batch
            what += " by batch (batch price; the run suspends, awaiting_batch, until collected)"
        out.append(f"calls: {what}: {price}{approx}")
    if not cost["calls"]:
        return out
    unpriced = cost["unpriced_calls"]
    priced = [x for x in cost["calls"] if x["cost"] is not None and not x.get("free")]
    if not priced and not unpriced:
        out.append("estimated cost: nothing (every call goes to a free provider)")
        return out
    if not priced:
        out.append(f"estimated cost: no price known for {unpriced} call(s)")
        return out
    total = f"at most {cost['total']:.4g}{unit}"
    if not currency:
        total += " (no currency: name it with [prices] currency in runner.toml)"
    if unpriced:
        total += f", plus {unpriced} call(s) with no price known"
    out.append(f"estimated cost: {total}")
    return out


def finish_plan(doc: dict[str, Any], fc: Any, *, as_json: bool, detailed: bool) -> None:
    from ...engine.plan.costs import OverBudget

    code = 0
    if doc["budget"] and doc["budget"]["over"]:
        code = OverBudget.exit_code
    elif detailed and doc["would_change"]:
        code = CHANGES_EXIT
    doc["exit_code"] = code
    if as_json:
        emit_json(doc)
    else:
        render_plan(doc, fc, verbose=True)
    sys.exit(code)


@cli.command("plan")
@pipeline_arg
@param_option
@click.option(
    "--force", multiple=True, metavar="STEP", help="Plan STEP and its downstream as forced."
)
@reask_option
@retry_uncertain_option
@click.option("--item", default=None, help="The item the apply would be for.")
@max_cost_option
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help=f"Exit {CHANGES_EXIT} when the apply would run, restore or ask anything (0: nothing).",
)
@state_option
@json_option
def plan_cmd(
    file: Path,
    params: tuple[str, ...],
    force: tuple[str, ...],
    reask: tuple[str, ...],
    retry_uncertain: bool,
    item: str | None,
    max_cost: float | None,
    detailed_exitcode: bool,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Say what `apply` would do, per step and for_each element, and why; never runs a step,
    calls a provider or writes anything. Counts the provider calls and estimates their cost from
    runner.toml's [prices]. Exit 0 (with --detailed-exitcode: 10 when something would run,
    restore or ask), 9 over a budget.

    Actions: run, cached, restore (an output is missing or was edited by hand), fail (an
    output was edited by hand, with on_edit: fail), unknown (depends on an upstream result not
    known before it runs), skip, ask (a human gate).

    Takes every flag of apply that changes what runs (-p, --force, --reask,
    --retry-uncertain, --item, --max-cost): the plan is that apply's.

    Example: runner plan pipelines/thumbnail.yaml --json
    """
    doc, fc = plan_document(
        file,
        parse_params(params),
        state_dir,
        force,
        item,
        max_cost,
        reask=reask,
        retry_uncertain=retry_uncertain,
    )
    finish_plan(doc, fc, as_json=as_json, detailed=detailed_exitcode)


@cli.command()
@pipeline_arg
@param_option
@click.option("--force", multiple=True, metavar="STEP", help="Explain as if STEP were forced.")
@reask_option
@retry_uncertain_option
@click.option("--item", default=None, help="The item the apply would be for.")
@state_option
@json_option
def explain(
    file: Path,
    params: tuple[str, ...],
    force: tuple[str, ...],
    reask: tuple[str, ...],
    retry_uncertain: bool,
    item: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Say, per step and element, whether the next apply would run it or use the cache, and why
    (the per-step view of `runner plan`; --json gives the plan document).

    Example: runner explain pipeline.yaml
    """
    doc, fc = plan_document(
        file,
        parse_params(params),
        state_dir,
        force,
        item,
        reask=reask,
        retry_uncertain=retry_uncertain,
    )
    if as_json:
        emit_json(doc)
        return
    from ...engine.plan.forecast import iter_lines

    for line in iter_lines(fc, verbose=True):
        echo(line)
    from ...expr.commandscope import confinement_lines

    for line in confinement_lines(doc["steps"]):
        echo(line)


@cli.command("costs")
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="Only calls finished since then: a date (2026-12-01) or an age (7d, 12h, 30min).",
)
@click.option("--run", "run_id", default=None, help="Only the calls of this run (an id or prefix).")
@click.option("--csv", "as_csv", is_flag=True, help="One CSV row per call on stdout.")
@state_option
@json_option
def costs(
    since: str | None, run_id: str | None, as_csv: bool, state_dir: str | None, as_json: bool
) -> None:
    """What was actually spent: every completed provider call's usage as the provider reported
    it, priced from runner.toml's [prices], by run (beside the plan's estimate of the same
    calls), step, model, provider and day. A call with no price known is counted apart.

    Example: runner costs --since 7d
    """
    from ...engine.plan.spendreport import (
        CSV_COLUMNS,
        csv_rows,
        prices_for_state,
        provider_settings,
        spend_report,
        spend_rows,
    )
    from .openstate import open_state

    state = open_state(state_dir)
    try:
        prices = prices_for_state(state.dir)
        settings_of = provider_settings(state.dir.resolve().parent)
        run = state.journal.get_run(run_id)["id"] if run_id else None
        start = _since(since)
        if as_csv:
            import csv
            import io

            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(CSV_COLUMNS)
            rows = spend_rows(state.journal, prices, since=start, run=run, settings_of=settings_of)
            writer.writerows(csv_rows(rows))
            echo_block(out.getvalue())  # model names and step ids are data: made inert
            return
        doc = spend_report(state.journal, prices, since=start, run=run, settings_of=settings_of)
    finally:
        state.close()
    if as_json:
        emit_json({**doc, "exit_code": 0})
        return
    for line in spend_lines(doc):
        echo(line)


def _since(text: str | None) -> float | None:
    """Epoch seconds of ``--since``: a date (local midnight) or an age before now."""
    if text is None:
        return None
    import time

    from ...errors import UsageError
    from ...state.gc import parse_age

    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        pass
    try:
        return time.time() - parse_age(text)
    except (UsageError, ValueError):
        raise UsageError(
            f"--since {text!r}: expected a date (2026-12-01) or an age (7d, 12h, 30min)"
        ) from None


def spend_lines(doc: dict[str, Any]) -> list[str]:
    """The report as lines: totals, then by run (with the plan's estimate), model and day."""
    unit = f" {doc['currency']}" if doc["currency"] else ""

    def money(totals: dict[str, Any]) -> str:
        text = f"{totals['cost']:.4g}{unit}"
        if totals["unpriced_calls"]:
            text += f" + {totals['unpriced_calls']} call(s) with no price known"
        return text

    def tokens(t: dict[str, Any]) -> str:
        parts = [f"{t['input_tokens']} in", f"{t['output_tokens']} out"]
        if t["cache_read_tokens"] or t["cache_write_tokens"]:
            parts.append(f"cache {t['cache_read_tokens']} read/{t['cache_write_tokens']} written")
        if t["images"]:
            parts.append(f"{t['images']} images")
        if t["batch_calls"]:
            parts.append(f"{t['batch_calls']} by batch")
        return ", ".join(parts)

    total = doc["total"]
    lost = doc.get("maybe_billed_calls") or 0
    lost_line = (
        f"  plus {lost} call(s) whose reply was lost: the provider may have billed them "
        "(runner runs show RUN lists them)"
    )
    if not total["calls"]:
        since = " since then)" if doc["since"] else ")"
        return [
            f"spent: nothing (no completed provider call{since}",
            *([lost_line] if lost else []),
        ]
    out = [f"spent: {money(total)} over {total['calls']} call(s) ({tokens(total)})"]
    if lost:
        out.append(lost_line)
    for run in doc["by_run"]:
        est = run["estimate"]
        beside = (
            "no estimate (no price known)" if est is None else f"plan's estimate {est:.4g}{unit}"
        )
        out.append(f"run {run['run_id']} ({run['pipeline']}): {money(run)}; {beside}")
        for step in doc["by_step"]:
            if step["run_id"] == run["run_id"]:
                out.append(f"  step {step['step_id']}: {money(step)} ({tokens(step)})")
    for model in doc["by_model"]:
        name = f"{model['provider']}/{model['model']}" if model["model"] else model["provider"]
        out.append(f"model {name}: {money(model)} over {model['calls']} call(s)")
    for day in doc["by_day"]:
        out.append(f"day {day['day']}: {money(day)}")
    return out
