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
rerun of a lost batch as on the next apply, until ``--force STEP`` (or ``--retry-uncertain``, as
for a paid call whose reply was lost) says to run it.

On Dask a task may run again after its outcome came back (a dead worker's results are made
anew while anything still wants them): by then the coordinator has removed the mark, so the
mark alone cannot refuse it. So each dispatch to a worker carries a ticket, a file the
coordinator makes before it sends the body (``issue``); a body starts only by taking it
(``claim`` unlinks it: one succeeds), and the coordinator drops any left once the outcome is
back. A run of the same task again finds no ticket and does not start.
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
TICKETS = ".tickets"  # beside a mark: the starts its body's dispatches may still make


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
        "lost, so it may have taken effect (maybe executed). It is marked repeat_safe: false, "
        "so it is not run again blindly: check whether it took effect, then run it again with: "
        f"runner apply PIPELINE --force {step_id} (or --retry-uncertain for every such body)"
    )


def issue(path: str) -> str:
    """A ticket for one start of the body whose mark is ``path`` (made by the coordinator
    before the body is sent to a worker); its path."""
    tickets = Path(f"{path}{TICKETS}")
    tickets.mkdir(parents=True, exist_ok=True)
    ticket = str(tickets / os.urandom(16).hex())
    os.close(os.open(ticket, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
    return ticket


def claim(
    path: str, run_id: str, step_id: str, element: int | None, ticket: str | None = None
) -> None:
    """Write the mark before the body begins (durably); raises NotRepeated when a body of this
    execution began before and was never seen to end, or when ``ticket`` (a worker's dispatch)
    was taken already: this is a run of a task whose body started once."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if ticket is not None:
        try:
            os.unlink(ticket)
        except FileNotFoundError:
            began = seen(target)
            if began is not None:  # it began (on a worker now lost) and was never seen to end
                raise NotRepeated(refusal(step_id, element, began)) from None
            where = f"step '{step_id}'" + (f" element {element}" if element is not None else "")
            raise NotRepeated(
                f"{where} is marked repeat_safe: false and Dask ran its task again (a worker "
                "was lost): the body had started once for it, so it is not started again"
            ) from None
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
    """Remove the mark and any ticket not taken (the outcome is back: no run of a task sent
    before may start the body now)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    tickets = Path(f"{path}{TICKETS}")
    try:  # (one failed listing where no body went to a worker: the usual case)
        names = os.listdir(tickets)
    except FileNotFoundError:
        return
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tickets / name)
    with contextlib.suppress(OSError):  # a ticket issued meanwhile keeps it
        tickets.rmdir()
