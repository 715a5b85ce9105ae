"""`runner verify --rebuild`: the rendering of runner/engine/run/rebuild.py's report (the options
are verify's, in commands_records.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ...errors import UsageError
from .base import emit_json
from .termtext import echo

PROGRESS_S = 0.5  # a progress line at most this often (and the last one)


def run_rebuild(
    state_dir: Path,
    *,
    sample: int,
    every: bool,
    include_paid: bool,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Rebuild, print the report, exit 1 when an execution differs or failed (0 otherwise).
    Raises UsageError for a bad --sample, NotFound for an unknown --run."""
    from ...engine.run.apply import State
    from ...engine.run.rebuild import rebuild

    if sample < 1:
        raise UsageError("--sample must be at least 1 (or check every execution: --all)")
    state = State.open(state_dir, readonly=True)
    last = [0.0]

    def progress(done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < PROGRESS_S:
            return
        last[0] = now
        echo(f"rebuild {done}/{total}: {what}", err=True)

    try:
        report = rebuild(
            state,
            run_id=run_id,
            sample=None if every else sample,
            include_paid=include_paid,
            progress=progress,
        )
    finally:
        state.close()
    code = 0 if report.ok else 1
    if as_json:
        emit_json({**report.to_json(), "exit_code": code})
    else:
        if not report.runs:
            echo("no runs to rebuild")
        for line in report.lines():
            echo(line)
    sys.exit(code)
