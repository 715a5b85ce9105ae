"""How the `runner` process ends: without tearing the interpreter down object by object.

A normal exit frees every module, function and cached object one at a time. After an apply
that is 60-130 ms on a 2-core machine: longer than many no-op commands take in all, and a tenth
of a 64-call llm fan-out's time beyond its provider waits. A command's work is finished and
recorded by then (journal committed, objects renamed into place, outputs written), so the
process leaves as soon as the things a normal exit would still do that can matter are done:
the atexit handlers (temporary directories, logging, a Dask cluster), and stdout and stderr
flushed. mypy ends its runs the same way, for the same reason.

Only the console entry point leaves like this; the library and in-process test runners never
call it. While a non-daemon thread still runs, the normal exit (which waits for it) is kept.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

# Python's own status when flushing stdout fails at exit (a closed pipe: `runner ... | head`).
_FLUSH_FAILED = 120


def status_of(code: object) -> int:
    """The exit status ``SystemExit(code)`` gives: None is 0, an int itself, anything else
    is printed on stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    from .termtext import echo

    with contextlib.suppress(OSError, ValueError):
        echo(code, err=True)  # escaped, as every line runner prints
    return 1


def _watched() -> bool:
    """Whether a profiler, tracer or coverage measurement is attached to this process."""
    return sys.getprofile() is not None or sys.gettrace() is not None or "coverage" in sys.modules


def leave(code: object) -> NoReturn:
    """End the process with ``SystemExit(code)``'s status, skipping interpreter teardown."""
    status = status_of(code)
    if _watched():
        raise SystemExit(status)  # a profiler or coverage writes its data at the normal exit
    # A process that never imported threading has no thread of its own to wait for (a no-op
    # apply: importing it just to ask cost ~0.6 ms).
    threading = sys.modules.get("threading")
    if threading is not None and any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        raise SystemExit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the reader, or by the command itself
            if stream is sys.stdout and status == 0:
                status = _FLUSH_FAILED
    os._exit(status)
