"""`runner watch`: re-apply on every edit, re-running only what changed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .base import (
    cli,
    emit_json,
    events_option,
    jobs_option,
    json_option,
    param_option,
    parse_params,
    pipeline_arg,
    state_option,
)
from .termtext import echo, safe_block


@cli.command()
@pipeline_arg
@param_option
@click.option(
    "--debounce",
    "debounce_ms",
    type=click.IntRange(min=1),
    default=80,
    show_default=True,
    metavar="MS",
    help="Start a cycle once no change arrived for MS ms.",
)
@click.option("--clear", is_flag=True, help="Clear the screen before each cycle.")
@click.option(
    "--no-interrupt",
    is_flag=True,
    help="Let a running apply finish before starting the next (default: cancel it).",
)
@jobs_option
@events_option
@state_option
@json_option
def watch(
    file: Path,
    params: tuple[str, ...],
    debounce_ms: int,
    clear: bool,
    no_interrupt: bool,
    jobs: int | None,
    events_file: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Apply the pipeline, then re-apply whenever it or a file it reads changes.

    Only changed content counts (saving a file unchanged runs nothing); an invalid edit prints
    the error and keeps the last good pipeline. Each cycle ends with one summary line (one JSON
    line with --json). Stop with Ctrl-C.

    Example: runner watch pipeline.yaml -p title=hello --debounce 200
    """
    from ..watch import Cycle, Watcher, WatchOptions

    if not file.is_file():
        raise click.BadParameter(f"{file} is not a file", param_hint="FILE")
    options = WatchOptions(
        overrides=parse_params(params),
        state_dir=Path(state_dir) if state_dir else None,
        debounce_ms=debounce_ms,
        interrupt=not no_interrupt,
        jobs=jobs,
    )
    reporter = _reporter(as_json, events_file)

    def on_start(number: int, changed: list[str]) -> None:
        if clear and not as_json:
            click.clear()

    def on_cycle(cycle: Cycle) -> None:
        if as_json:
            emit_json(cycle.to_json())
        else:
            echo(safe_block(cycle.line()))  # names and reasons are data

    watcher = Watcher(file, options, on_cycle=on_cycle, on_start=on_start, reporter=reporter)
    if not as_json:
        echo(f"watching {file} (Ctrl-C to stop)", err=True)
    try:
        from ...engine.run.apply import run_async

        code = run_async(_until_signal(watcher))
    finally:
        reporter.close()
    sys.exit(code)


async def _until_signal(watcher: Any) -> int:
    """Run the watcher until SIGINT/SIGTERM; a second signal stops without waiting."""
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    code: int = await watcher.run(stop)
    return code


def _reporter(as_json: bool, events_file: str | None) -> Any:
    from ...engine.run.events import FanOut, JsonLinesReporter
    from .console import PlainReporter

    reporters: list[Any] = []
    if not as_json:
        reporters.append(PlainReporter())
    if events_file:
        stream = open(events_file, "a", encoding="utf-8")  # noqa: SIM115 (the reporter closes it)
        reporters.append(JsonLinesReporter(stream, close_stream=True))
    return FanOut(*reporters)
