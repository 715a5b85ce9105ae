"""Review commands: decide, resume, runs cancel/events, collections, gc."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ...errors import UsageError
from ...state.canonical import loads_strict
from .base import cli, emit_json, json_option, runs, state_option
from .openstate import open_state
from .termtext import echo, echo_block, echo_json


def _parse_inputs(pairs: tuple[str, ...], input_file: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if input_file:
        try:  # strict JSON: a NaN would reach the journal (which refuses it)
            loaded = loads_strict(Path(input_file).read_bytes())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--input-file {input_file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--input-file {input_file}: expected a JSON object")
        values.update(loaded)
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--input expects KEY=VALUE, got '{pair}'")
        k, v = pair.split("=", 1)
        values[k.strip()] = v
    return values


@cli.command()
@click.argument("run_id")
@click.argument("gate")
@click.argument("decision", type=click.Choice(["approve", "reject", "revise"]))
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Reviewer input (revise: fed back to the gate's `revise` step).",
)
@click.option(
    "--input-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A JSON object of reviewer input.",
)
@click.option("--by", default=None, help="Who decides (default: the login name).")
@click.option("--comment", default=None, help="Why.")
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue the run at once (--no-resume only records the decision).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress output while the run continues.")
@state_option
@json_option
def decide(
    run_id: str,
    gate: str,
    decision: str,
    inputs: tuple[str, ...],
    input_file: str | None,
    by: str | None,
    comment: str | None,
    resume: bool,
    quiet: bool,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Decide a run waiting at a human gate, then continue the run (as `runner resume` does).

    approve: the run goes on past the gate; reject: it ends `rejected` (exit 8) and nothing
    past the gate runs; revise: the gate's `revise` step re-runs with --input as feedback and
    the gate asks again (exit 7). The exit code is the continued run's.

    Example: runner decide 20261202-101500-ab12cd review revise --input feedback="shorter"
    """
    from ...engine.run.gates import Decision, record_decision
    from .runend import end_text

    values = _parse_inputs(inputs, input_file)
    state = open_state(state_dir, readonly=False)
    try:
        row = record_decision(
            state.journal,
            state.objects,
            run_id,
            gate,
            Decision(decision),
            input=values,
            by=by,
            comment=comment,
        )
        said = f"{row.gate}: {_verb(decision)} by {row.by} (round {row.round})"
        doc: dict[str, Any] = {"run_id": row.run_id, "decision": row.to_json(), "resumed": resume}
        if not resume:
            if as_json:
                emit_json({**doc, "exit_code": 0})
            else:
                echo(f"{said}; continue with: runner resume {row.run_id}")
            return
        if not as_json:
            echo(f"{said}; continuing run {row.run_id}")
        report = _resume(state, row.run_id, as_json, quiet)
        text = "" if as_json else end_text(state, report)
    finally:
        state.close()
    if as_json:
        emit_json({**doc, **report.to_json(), "run_id": row.run_id})
    else:
        echo_block(text)
    sys.exit(report.exit_code)


def _resume(state: Any, run_id: str, as_json: bool, quiet: bool, *, jobs: int | None = None) -> Any:
    """Continue ``run_id`` with a console that has its plan: phases in pipeline order."""
    from ...engine.run.apply import apply_plan
    from ...engine.run.runctl import resume_plan
    from .commands_core import _reporter  # imported when used: command modules load apart

    plan, options = resume_plan(state, run_id, jobs=jobs)
    reporter = _reporter(as_json, len(plan.order), None, quiet, plan)
    try:
        return apply_plan(plan, state, options, reporter)
    finally:
        reporter.close()


def _verb(decision: str) -> str:
    return {"approve": "approved", "reject": "rejected", "revise": "revision asked"}[decision]


@cli.command()
@click.argument("run_id")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@state_option
@json_option
def resume(
    run_id: str, jobs: int | None, quiet: bool, state_dir: str | None, as_json: bool
) -> None:
    """Continue a suspended, cancelled or failed run (same run id; completed steps are cached).

    Example: runner resume 20261202-101500-ab12cd
    """
    from .runend import end_text

    state = open_state(state_dir, readonly=False)
    try:
        report = _resume(state, run_id, as_json, quiet, jobs=jobs)
        text = "" if as_json else end_text(state, report)
    finally:
        state.close()
    doc = report.to_json()
    if as_json:
        emit_json(doc)
    else:
        echo_block(text)
    sys.exit(report.exit_code)


@runs.command("cancel")
@click.argument("run_id")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds to wait for the run to stop (0: do not wait).",
)
@state_option
@json_option
def runs_cancel(run_id: str, wait_s: float, state_dir: str | None, as_json: bool) -> None:
    """Cancel a running (or suspended) run from another terminal; completed work is kept.

    Example: runner runs cancel 20261202-101500-ab12cd
    """
    from ...engine.run.runctl import kept_work, request_cancel, wait_for_end
    from ..counts import amount

    state = open_state(state_dir, readonly=False)
    try:
        result = request_cancel(state.journal, run_id)
        if result["status"] == "cancelling" and wait_s > 0:
            result["status"] = wait_for_end(state.journal, result["run_id"], wait_s)
        # what the run keeps, in the words plan and apply count in (steps and elements)
        result["kept"] = kept_work(state.journal, result["run_id"])
    finally:
        state.close()
    if as_json:
        emit_json({**result, "exit_code": 0})
        return
    kept = amount(result["kept"]["steps"], result["kept"]["elements"])
    echo(
        f"run {result['run_id']}: {result['status']}; kept {kept} done"
        + (f" (runner resume {result['run_id']} goes on from there)" if kept != "nothing" else "")
    )


@runs.command("events")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run finishes.")
@state_option
def runs_events(run_id: str, follow: bool, state_dir: str | None) -> None:
    """Print a run's journaled events as JSON lines, in order.

    Example: runner runs events 20261202-101500-ab12cd --follow
    """
    from ...engine.run.runctl import stream_events

    state = open_state(state_dir)
    try:
        for ev in stream_events(state.journal, run_id, follow=follow):
            echo_json(ev)
    finally:
        state.close()


@runs.command("decisions")
@click.argument("run_id")
@state_option
@json_option
def runs_decisions(run_id: str, state_dir: str | None, as_json: bool) -> None:
    """Show a run's gate decisions (pending and made), oldest first.

    Example: runner runs decisions 20261202-101500-ab12cd
    """
    from ...engine.run.gates import decisions

    state = open_state(state_dir)
    try:
        run = state.journal.get_run(run_id)
        rows = decisions(state.journal, run["id"])
    finally:
        state.close()
    if as_json:
        emit_json({"run_id": run["id"], "decisions": [r.to_json() for r in rows], "exit_code": 0})
        return
    echo_block(render_decisions([r.to_json() for r in rows]))


def render_decisions(rows: list[dict[str, Any]]) -> str:
    """Every round, oldest first; then, for a gate still waiting, all it shows."""
    from ...review.gateview import printable, rounds_lines, show_lines

    if not rows:
        return "no decisions\n"
    lines = rounds_lines(rows)
    for r in rows:
        if r["status"] != "pending":
            continue
        summary = r["summary"] or {}
        lines.append("")
        lines.append(f"Waiting at gate '{printable(r['gate'])}' (round {r['round']})")
        if summary.get("summary"):
            lines.append(f"  {printable(str(summary['summary']))}")
        lines.extend(show_lines(summary.get("show"), limit=None)[0])
    return "\n".join(lines) + "\n"


# -- collections ------------------------------------------------------------------------------


def _state_path(state_dir: str | None) -> Path:
    from ...engine.run.locate import state_dir_here

    return state_dir_here(state_dir)


@cli.group()
def collections() -> None:
    """Document collections filled by `ingest` steps (SQLite full-text search).

    Example: runner collections search docs "invoice"
    """


@collections.command("list")
@state_option
@json_option
def collections_list(state_dir: str | None, as_json: bool) -> None:
    """List collections with their document counts.

    Example: runner collections list --json
    """
    from ...state.collections import Collections

    with Collections(_state_path(state_dir)) as cols:
        rows = cols.names_and_counts()
    if as_json:
        emit_json({"collections": rows, "exit_code": 0})
        return
    if not rows:
        echo("no collections")
    for r in rows:
        echo(f"{r['name']:<24} {r['count']:>6} documents")


@collections.command("show")
@click.argument("name")
@click.option("--limit", default=50, show_default=True)
@state_option
@json_option
def collections_show(name: str, limit: int, state_dir: str | None, as_json: bool) -> None:
    """Show a collection's documents (id, metadata, start of the text).

    Example: runner collections show docs --limit 10
    """
    from ...state.collections import Collections

    with Collections(_state_path(state_dir)) as cols:
        docs = cols.documents(name, limit)
        count = cols.count(name)
    if as_json:
        emit_json({"collection": name, "count": count, "documents": docs, "exit_code": 0})
        return
    echo(f"{name}: {count} documents")
    for d in docs:
        text = " ".join(d["text"].split())[:60]
        echo(f"  {d['id']:<32} {json.dumps(d['metadata'], ensure_ascii=False)}  {text}")


@collections.command("search")
@click.argument("name")
@click.argument("query")
@click.option("--limit", default=20, show_default=True)
@click.option(
    "--syntax",
    is_flag=True,
    help="Read QUERY as an SQLite FTS5 query (OR, NEAR, \"phrases\", prefix*) instead of words.",
)
@state_option
@json_option
def collections_search(
    name: str, query: str, limit: int, syntax: bool, state_dir: str | None, as_json: bool
) -> None:
    """Full-text search in a collection's texts and document names, best match first.

    QUERY is words, each searched as a word (a hyphenated one as a phrase: acme-invoice); every
    word must match. With --syntax it is an FTS5 query.

    Example: runner collections search docs acme-invoice
    """
    from ...state.collections import Collections

    with Collections(_state_path(state_dir)) as cols:
        hits = cols.search(name, query, limit, syntax=syntax)
    if as_json:
        emit_json({"collection": name, "query": query, "hits": hits, "exit_code": 0})
        return
    if not hits:
        echo("no matches")
    for h in hits:  # the id, then its snippet's own lines, indented
        snippet = "\n".join("    " + line for line in h["snippet"].splitlines() if line.strip())
        echo_block(f"{h['id']}\n{snippet}" if snippet else h["id"])


@cli.command()
@click.option(
    "--keep-last",
    type=int,
    default=None,
    metavar="K",
    help="Keep the last K runs of every pipeline/item.",
)
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Delete runs older than AGE (30d, 12h, 45min, 2w; 'm' is refused: minutes or months?); "
    "with --keep-last, both must hold.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="SECONDS",
    help="Wait this long for running applies to end (gc deletes nothing while one runs).",
)
@state_option
@json_option
def gc(
    keep_last: int | None,
    older_than: str | None,
    dry_run: bool,
    wait_s: float,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Delete old runs and the objects nothing references any more.

    Never deleted: running or waiting runs, runs with a picked iteration, cache entries a kept
    run uses, objects a kept run, iteration or decision references. gc deletes only while no
    apply is running (an apply may reuse any object, however old): it waits --wait seconds for
    running applies, then stops without deleting anything (exit 2).

    Example: runner gc --keep-last 5 --older-than 30d --dry-run
    """
    from ...state.gc import collect_garbage, parse_age

    age = parse_age(older_than) if older_than else None
    state = open_state(state_dir, readonly=False)
    try:
        result = collect_garbage(
            state, keep_last=keep_last, older_than=age, dry_run=dry_run, wait_s=wait_s
        )
    finally:
        state.close()
    if as_json:
        emit_json({**result.to_json(), "exit_code": 0})
        return
    verb = "would delete" if dry_run else "deleted"
    echo(
        f"{verb} {len(result.runs_deleted)} runs ({result.runs_kept} kept), "
        f"{result.executions_deleted} executions, {len(result.objects_deleted)} objects, "
        f"{len(result.run_dirs_deleted)} run folders ({result.bytes_freed / 1e6:.1f} MB)"
        + (f", {result.batches_deleted} provider batches" if result.batches_deleted else "")
    )
    for d in result.decisions_forgotten:
        # said, not silent: the next apply asks this gate again on inputs decided before
        echo(
            f"{'would forget' if dry_run else 'forgot'} {d['decision']} by {d['by']} at gate "
            f"'{d['gate']}' of {d['pipeline']} (run {d['run']}): it asks again on those inputs"
        )
