"""What `runner apply` does, without click: the click command (commands_core.apply) and the
quick path read before click loads (quickapply.py) both call ``run_apply``.

A run that does work paid ~5 ms of every process importing click and building the command
group (issue 43); ``run_apply`` prints through a ``Printer`` each caller gives: click's
``echo`` for the command, plain writes that print the same bytes for the quick path.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import UsageError


class Printer:
    """How a command prints: a line (``termtext.echo``), a block (``echo_block``), a JSON
    document on stdout (``base.emit_json``). (Plain classes here: a no-op apply answered before
    click loads does not import dataclasses, ~5 ms.)"""

    __slots__ = ("block", "json", "line")

    def __init__(
        self,
        line: Callable[..., None],
        block: Callable[..., None],
        json: Callable[[dict[str, Any]], None],
    ) -> None:
        self.line, self.block, self.json = line, block, json


def _write(text: str, err: bool) -> None:
    # What click.echo does with a str on a text stream whose encoding is not ASCII (the quick
    # path leaves any other stream to click): write, then flush. What runner prints is made
    # inert first (termtext.safe), so there is no ANSI sequence for click to strip.
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(text)
    stream.flush()


def _plain_line(line: object = "", *, err: bool = False) -> None:
    from ...source.termtext import safe

    _write(safe(line) + "\n", err)


def _plain_block(text: str, *, err: bool = False) -> None:
    from ...source.termtext import safe_block

    _write(safe_block(text) + ("" if text.endswith("\n") or not text else "\n"), err)


def _plain_json(doc: dict[str, Any]) -> None:
    from .termtext import json_line

    _write(json_line(doc, warn=_plain_line) + "\n", False)


PLAIN = Printer(_plain_line, _plain_block, _plain_json)


class ApplyRequest:
    """`runner apply`'s command line, as read (click's or quickapply's reading)."""

    def __init__(
        self,
        file: Path,
        overrides: dict[str, str],
        *,
        jobs: int | None = None,
        force: tuple[str, ...] = (),
        reask: tuple[str, ...] = (),
        dry_run: bool = False,
        item: str | None = None,
        events_file: str | None = None,
        out_dir: str | None = None,
        retry_uncertain: bool = False,
        quiet: bool = False,
        max_cost: float | None = None,
        executor: str | None = None,
        scheduler: str | None = None,
        workers: int | None = None,
        threads: int | None = None,
        remote: str | None = None,
        state_dir: str | None = None,
        as_json: bool = False,
        began_ns: int | None = None,
    ) -> None:
        self.file, self.overrides, self.jobs, self.item = file, overrides, jobs, item
        self.force, self.reask, self.dry_run = force, reask, dry_run
        self.events_file, self.out_dir, self.quiet = events_file, out_dir, quiet
        self.retry_uncertain, self.max_cost, self.remote = retry_uncertain, max_cost, remote
        self.executor, self.scheduler = executor, scheduler
        self.workers, self.threads = workers, threads
        self.state_dir, self.as_json = state_dir, as_json
        # before any file the fingerprint names is read
        self.began_ns = time.time_ns() if began_ns is None else began_ns


def reporter_for(
    as_json: bool, total: int, events_file: str | None, quiet: bool = False, plan: Any = None
) -> Any:
    """The console reporter (with ``plan``, lines go under their phase, in pipeline order)."""
    from ...engine.run.events import FanOut, JsonLinesReporter
    from .console import LiveReporter, PlainReporter, WarningsReporter
    from .termtext import isatty_stderr

    reporters: list[Any] = []
    if quiet:
        reporters.append(WarningsReporter())  # quiet means no progress, not no warnings
    elif isatty_stderr() and not as_json:
        reporters.append(LiveReporter(total, plan=plan))
    else:
        reporters.append(PlainReporter(plan=plan))
    if events_file:
        try:
            stream = open(events_file, "a", encoding="utf-8")  # noqa: SIM115 (the reporter closes it)
        except OSError as exc:
            from ...source.termtext import safe

            raise UsageError(f"--events {safe(events_file)}: {exc.strerror}") from None
        reporters.append(JsonLinesReporter(stream, close_stream=True))
    return FanOut(*reporters)


def install_sigterm() -> None:
    # SIGTERM cancels like Ctrl-C: the run is marked cancelled, completed work is kept.
    import signal  # (here: a no-op apply, answered before any run, does not load it)

    def handler(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_apply(req: ApplyRequest, out: Printer, *, console: bool) -> None:
    """Run the pipeline as `runner apply` does, print what it prints, and leave with its exit
    status (SystemExit). ``console``: the `runner` process itself (entry.py), whose garbage
    collector a run may tune. Raises RunnerError (and any other error) for the caller's one
    place that reports errors (failures.report)."""
    from ...engine.plan import fastpath
    from ...engine.run.locate import state_dir_for

    file, overrides, item, state_dir = req.file, req.overrides, req.item, req.state_dir
    if req.dry_run:
        from ...engine.plan.plandoc import plan_document
        from .commands_plan import finish_plan

        doc, fc = plan_document(
            file,
            overrides,
            state_dir,
            req.force,
            item,
            req.max_cost,
            reask=req.reask,
            retry_uncertain=req.retry_uncertain,
        )
        finish_plan(doc, fc, as_json=req.as_json, detailed=False)
    state_path = state_dir_for(file, state_dir)
    pipeline_path = file.resolve()
    asked = req.force or req.reask or req.out_dir or req.events_file or req.retry_uncertain
    if not (asked or req.remote or req.max_cost is not None):
        from .quickapply import noop_line, noop_report

        # With ``file``: a pipeline changed only in values no key depends on (a description,
        # retries) is checked against the schema, and then still fully cached.
        noop = noop_report(state_path, pipeline_path, overrides, item, file=file)
        if noop is not None:
            if req.as_json:
                out.json(noop)
            else:
                out.line(noop_line(noop))
            sys.exit(0)

    from ...engine.run.apply import State, apply_plan
    from ...engine.run.options import ApplyOptions
    from ...pipeline.compiler import compile_pipeline

    plan = compile_pipeline(file, overrides)
    for f in req.force:
        if f not in plan.steps:
            raise UsageError(f"--force: unknown step '{f}'")
    from ...engine.plan.plandoc import check_budget_first, check_reask

    check_reask(plan, req.reask)
    forced = frozenset(plan.downstream(set(req.force))) if req.force else frozenset()
    check_budget_first(
        file,
        plan,
        overrides,
        state_dir,
        req.force,
        item,
        req.max_cost,
        reask=req.reask,
        retry_uncertain=req.retry_uncertain,
    )
    from ...engine.run.preflight import check_out_dir

    check_out_dir(plan, req.out_dir)
    options = ApplyOptions(
        force=forced,
        reask=frozenset(req.reask),
        item=item,
        retry_uncertain=req.retry_uncertain,
        max_cost=req.max_cost,
        remote=req.remote,
        executor=req.executor,
        scheduler=req.scheduler,
        workers=req.workers,
        threads=req.threads,
    )
    if req.jobs:
        options.jobs = req.jobs
        options.jobs_given = True
    from ...engine.run.locate import unmarked_new_state

    if unmarked_new_state(file, state_path, state_dir):
        from ...source.termtext import shown_path

        # docs/state.md: a state made where no project is found is said, with the ways out
        folder = shown_path(pipeline_path.parent)
        out.line(
            f"runner: no runner.toml or .runner/ {'here' if folder == '.' else 'in ' + folder} or "
            f"above: created a new state in {shown_path(state_path)}/ (`runner init` marks a "
            "project root; --state DIR or $RUNNER_STATE puts the state elsewhere)",
            err=True,
        )
    state = State.open(state_path)
    reporter = reporter_for(req.as_json, len(plan.order), req.events_file, req.quiet, plan)
    install_sigterm()
    if console:  # start-up is over (entry.py): what it made lives as long as the process
        gc.freeze()
        gc.enable()
        # The process ends with the run: the run's thresholds stay after it (run_async puts
        # back those it found), or the run's survivors were walked once more as the process
        # ends (one collection of ~100k objects, 6 ms of a 64-call llm for_each's ~0.4 s).
        from ...engine.run.runloop import RUN_GC_THRESHOLDS

        gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        report = apply_plan(plan, state, options, reporter)
    except KeyboardInterrupt:
        reporter.close()
        state.close()
        if req.as_json:
            out.json({"run": None, "exit_code": 130, "error": {"message": "cancelled"}})
        out.line("cancelled; completed work is kept, the next apply resumes", err=True)
        sys.exit(130)
    reporter.close()
    try:
        if fastpath.eligible(plan, options):
            fastpath.record(
                state_path, pipeline_path, overrides, item, plan, report, began_ns=req.began_ns
            )
        else:
            fastpath.forget(state_path, pipeline_path, overrides, item)
        doc = report.to_json()
        extra = after_apply(plan, state, report, req.out_dir, req.as_json)
        doc.update(extra)
        if req.as_json:
            out.json(doc)
        else:
            from .runend import end_text

            out.block(end_text(state, report))
    finally:
        state.close()
    sys.exit(doc.get("exit_code", report.exit_code))


def after_apply(
    plan: Any, state: Any, report: Any, out_dir: str | None, as_json: bool
) -> dict[str, Any]:
    """Hooks for workflows that add to apply's output (thumbnail iterations, gates)."""
    if not any(s.uses == "image" for s in plan.steps.values()):
        return {}  # the hooks act on image steps only: not worth their import otherwise
    try:
        from ...review.thumbs.hooks import after_apply as hooks_after_apply
    except ModuleNotFoundError:
        return {}
    result: dict[str, Any] = hooks_after_apply(
        plan, state, report, out_dir=out_dir, as_json=as_json
    )
    return result
