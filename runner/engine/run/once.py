"""Steps declared ``repeat_safe: false``: started at most once unless the user says again.

Most bodies may run twice harmlessly (they write objects atomically; a rerun makes the same
bytes), and runner lets that happen when a worker dies (Dask runs the lost batch again
elsewhere) or a process is killed (the next apply runs what was unfinished). A body with an
effect outside runner (it sends a mail, charges a card, pushes a release) declares it is not
safe to repeat. Then, before its body runs, its execution is journaled as started (committed)
and a mark is written under ``<state>/started/<key>`` -- on the machine that runs it, by the
body's own side, durably, before the body begins. The coordinator removes the mark once the
body's outcome is back. A mark still there means a body began and nobody saw it end (its
process or its worker was lost): the step fails with a message instead of running again, on the
rerun of a lost batch as on the next apply, until ``--force STEP`` says to run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from ...errors import StepFailure

DIR = "started"


class NotRepeated(StepFailure):
    """The body began before and never reported back: it is not started again."""


def mark_path(state_dir: Path, key: str) -> Path:
    return state_dir / DIR / key


def seen(path: Path) -> dict[str, object] | None:
    """What the mark says of the body that began (run, host, pid, time), or None."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def refusal(step_id: str, element: int | None, doc: dict[str, object]) -> str:
    where = f"step '{step_id}'" + (f" element {element}" if element is not None else "")
    began = doc.get("at")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(began))
        if isinstance(began, (int, float))
        else "earlier"
    )
    by = f" by run {doc['run']}" if doc.get("run") else ""
    on = f" on {doc['host']} (pid {doc.get('pid')})" if doc.get("host") else ""
    return (
        f"{where} was started {when}{by}{on} and never finished: its process or worker was "
        "lost. It is marked repeat_safe: false, so it is not run again blindly: check whether "
        f"it took effect, then run it again with: runner apply PIPELINE --force {step_id}"
    )


def claim(path: str, run_id: str, step_id: str, element: int | None) -> None:
    """Write the mark before the body begins (durably); raises NotRepeated when a body of this
    execution began before and was never seen to end."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = {"run": run_id, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise NotRepeated(refusal(step_id, element, seen(target) or {})) from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc))
        f.flush()
        os.fsync(f.fileno())
    dfd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def clear(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
