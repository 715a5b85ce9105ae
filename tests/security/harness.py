"""Measuring a hostile input: CPU time, peak traced memory, and what it tried to open or run.

The time is the thread's CPU time, not wall time: a bomb that is stopped does little work,
however loaded the machine is (wall time under another test suite's load measured the load)."""

from __future__ import annotations

import contextvars
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2.debug  # noqa: F401  (imported lazily on the first error: not a hostile open)

MAX_SECONDS = 1.0
MAX_PEAK_BYTES = 100 * 1024 * 1024

_WATCHING: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "watching", default=None
)
_WATCHED_EVENTS = (
    "open",
    "os.system",
    "subprocess.Popen",
    "os.exec",
    "os.posix_spawn",
    "os.getenv",
    "os.putenv",
    "socket.connect",
    "shutil.copyfile",
)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    seen = _WATCHING.get()
    if seen is not None and event.startswith(_WATCHED_EVENTS):
        seen.append((event, repr(args[:1])))


sys.addaudithook(_hook)  # audit hooks cannot be removed; it only records while watching


@dataclass
class Outcome:
    error: BaseException | None
    seconds: float
    peak_bytes: int
    events: list[tuple[str, str]] = field(default_factory=list)


def attempt(fn: Callable[[], Any]) -> Outcome:
    """Run ``fn`` twice: once timed (CPU seconds of this thread), once under tracemalloc (which
    slows it down)."""
    events: list[tuple[str, str]] = []
    token = _WATCHING.set(events)
    error: BaseException | None = None
    started = time.thread_time()
    try:
        fn()
    except Exception as exc:
        error = exc
    finally:
        seconds = time.thread_time() - started
        _WATCHING.reset(token)
    tracemalloc.start()
    try:
        fn()
    except Exception:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Outcome(error, seconds, peak, events)
