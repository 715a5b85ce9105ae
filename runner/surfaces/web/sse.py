"""Live progress: a run's journaled events as server-sent events.

The engine writes events to the journal's ``events`` table (from whatever process runs the
pipeline); the stream polls that table every ``POLL_S`` and pushes new rows. It ends, with an
``end`` event carrying the run's status, once the run is no longer running and nothing new came.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

from ...engine.run.apply import State
from ...engine.run.runctl import event_json
from .adapters import Jobs

POLL_S = 0.2
KEEPALIVE_S = 15.0


def frame(data: object, *, event: str | None = None, ident: int | None = None) -> str:
    """One SSE frame (data is JSON on a single line)."""
    head = ""
    if ident is not None:
        head += f"id: {ident}\n"
    if event is not None:
        head += f"event: {event}\n"
    return head + "data: " + json.dumps(data, ensure_ascii=False, default=str) + "\n\n"


async def event_stream(
    state_dir: Path, run_id: str, after: int, jobs: Jobs, poll_s: float = POLL_S
) -> AsyncIterator[str]:
    """SSE frames for run ``run_id`` (an exact id; resolve prefixes before) after seq ``after``."""
    state = State.open(state_dir, readonly=True)
    try:
        yield "retry: 1000\n\n"
        last_sent = time.monotonic()
        while True:
            rows = state.journal.events(run_id, after)
            for row in rows:
                after = int(row["seq"])
                yield frame(event_json(row), ident=after)
            if rows:
                last_sent = time.monotonic()
            status = state.journal.get_run(run_id)["status"]
            # A run this server started is done only once its iterations are recorded too.
            if not rows and status != "running" and not jobs.busy(run_id):
                yield frame({"run_id": run_id, "status": status, "last_event": after}, event="end")
                return
            if time.monotonic() - last_sent > KEEPALIVE_S:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(poll_s)
    finally:
        state.close()
