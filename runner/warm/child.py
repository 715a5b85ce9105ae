"""A warm server's child becoming the command's process, then running the command.

Everything the command's process had that the server's child would otherwise have differently is
set here from the command's request: standard streams and working directory (its own
descriptors), environment, argv, umask, niceness, resource limits, ignored and blocked signals,
time zone. The rest is equal by fit.identity, or refused by the server before forking.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (signal imports enum)
import contextlib
import importlib
import io
import os
import sys
from typing import Any, NoReturn

_SETUP_FAILED = 125  # as `env` and `nice` report they could not run the command


def become(request: dict[str, Any], fds: list[int], entry: str) -> NoReturn:
    """Take the command's process state, run the command line by ``entry`` ("module:function",
    the console command's body: it ends the process itself), and end with its status."""
    try:
        _take_over(request, fds)
    except BaseException as exc:  # whatever it is, nothing returns into the server's loop
        _say(
            f"runner: the warm server could not take this command's process state ({exc}); "
            "RUNNER_SERVER=0 runs applies without it\n"
        )
        os._exit(_SETUP_FAILED)
    code = 1
    try:
        module, _, function = entry.partition(":")
        getattr(importlib.import_module(module), function)()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _flush()
        os._exit(code)


def _take_over(request: dict[str, Any], fds: list[int]) -> None:
    os.setsid()  # out of the server's group: a signal to one is not a signal to the other
    stdin, stdout, stderr, cwd = fds
    for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(fd, target)
    os.fchdir(cwd)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    _limits(request["limits"], request["nice"])
    os.umask(request["umask"])
    _signals(set(request["ignored"]), set(request["blocked"]))
    os.environb.update(request["environ"])
    import time

    time.tzset()  # the command's TZ
    sys.argv[:] = request["argv"]
    sys.orig_argv[:] = request["orig_argv"]
    _streams()
    from ..source import secretnames

    secretnames.environ_adopted()


def _limits(limits: dict[str, tuple[int, int]], nice: int) -> None:
    import resource

    for name, pair in limits.items():
        soft, hard = pair
        resource.setrlimit(getattr(resource, name), (soft, hard))
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > now:
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def _signals(ignored: set[int], blocked: set[int]) -> None:
    """The command's ignored signals ignored (`nohup`), the rest at the interpreter's own
    start-up dispositions; its blocked ones blocked."""
    for signum in _signal.valid_signals():
        if signum in (_signal.SIGKILL, _signal.SIGSTOP):
            continue
        try:
            now = _signal.getsignal(signum)
            if signum in ignored:
                _signal.signal(signum, _signal.SIG_IGN)
            elif now == _signal.SIG_IGN:
                _signal.signal(signum, _signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    _signal.pthread_sigmask(_signal.SIG_SETMASK, blocked)


def _streams() -> None:
    """New sys.stdin/stdout/stderr on the command's descriptors, made as the interpreter makes
    them at start-up: line-buffered on a terminal (stderr always), the encoding and error
    handlers the shared locale and options gave the server's."""
    made = []
    for fd, mode, old in (
        (0, "rb", sys.__stdin__),
        (1, "wb", sys.__stdout__),
        (2, "wb", sys.__stderr__),
    ):
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
        # -u or PYTHONUNBUFFERED (the same for the server): its stdout writes through
        unbuffered = fd != 0 and bool(getattr(old, "write_through", False))
        buffer: Any = raw
        if not unbuffered:
            buffer = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        made.append(
            io.TextIOWrapper(
                buffer,
                encoding=getattr(old, "encoding", None),
                errors=getattr(old, "errors", None),
                newline="\n",
                line_buffering=not unbuffered and (fd == 2 or raw.isatty()),
                write_through=bool(unbuffered),
            )
        )
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "backslashreplace"))
