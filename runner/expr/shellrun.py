"""Run a ``/bin/sh -c`` command in its own process group, cheaply, from the event loop.

asyncio's subprocess machinery costs the loop ~0.65 ms of CPU per command on a 2-core machine (a
waiter thread per child, two pipe transports, epoll registrations, a protocol per stream): for a
pipeline of a thousand short shell steps that is a third of the run. Here the command writes its
stdout and stderr into anonymous memory files and the loop learns of its exit through a pidfd
(Linux >= 5.3), about 0.25 ms a command. Where there is no pidfd a worker thread waits instead.

A command whose directory is runner's own (the usual case: `runner apply` from the project) is
started with os.posix_spawn, which does in C what subprocess.Popen does in Python (~0.15 ms less
a command, a third of the spawn); elsewhere, Popen (posix_spawn cannot change directory before
Python 3.13). Both give the command the same: /dev/null as stdin, the two memory files, no other
descriptor, default SIGPIPE/SIGXFSZ handling, a session of its own.

The command runs in a new session, so it and everything it starts form one process group: on a
timeout, a cancel, or a normal exit that left background children, the whole group is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Finished:
    """How a command ended. ``code`` is None when it was killed for running past its timeout."""

    code: int | None
    stdout: bytes
    stderr: bytes

    @property
    def timed_out(self) -> bool:
        return self.code is None


async def run_shell(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    keep: int | None = None,
) -> Finished:
    """Run ``/bin/sh -c command`` in ``cwd``; its output is captured (the last ``keep`` bytes of
    each stream when given, else all of it).

    Raises OSError when the shell cannot start. A cancel kills the process group and propagates.
    """
    with _Captured() as out, _Captured() as err:
        proc = _spawn(["/bin/sh", "-c", command], cwd, env, out.fd, err.fd)
        timed_out = False
        try:
            if timeout is None:
                await _exit_of(proc)
            else:
                await asyncio.wait_for(_exit_of(proc), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            kill_group(proc.pid)
            proc.wait()  # already exited, or just killed: does not block
        code = None if timed_out else proc.returncode
        return Finished(code, out.contents(keep), err.contents(keep))


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _exit_of(proc: _Child) -> None:
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or a sandbox refusing it
        await loop.run_in_executor(None, proc.wait)
        return
    try:
        exited: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, exited)
        try:
            await exited
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Child(Protocol):
    """What run_shell uses of a started command: a subprocess.Popen, or a _Spawned."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def wait(self) -> int: ...


class _Spawned:
    """A command started with os.posix_spawn: its pid, and Popen's wait (returncode negative
    for a signal; the lock keeps a worker thread's wait and run_shell's from both reaping)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def wait(self) -> int:
        with self._lock:
            if self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                except ChildProcessError:  # reaped by someone else: Popen says 0 too
                    status = 0
                self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode


# Signals Python ignores that a command must get with their default action (SIGPIPE ends
# `yes | head`'s yes), as Popen's restore_signals does.
_DEFAULT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


def _spawn(argv: list[str], cwd: Path, env: Mapping[str, str] | None, out: int, err: int) -> _Child:
    stdin = _devnull()
    inherited = _inheritable_fds() if hasattr(os, "pidfd_open") and _is_cwd(cwd) else None
    if inherited is not None and min(stdin, out, err) > 2:
        closes = [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited]
        pid = os.posix_spawn(
            argv[0],
            argv,
            os.environ if env is None else env,
            file_actions=[
                *closes,
                (os.POSIX_SPAWN_DUP2, stdin, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, err, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
        return _Spawned(pid)
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=stdin,
        stdout=out,
        stderr=err,
        start_new_session=True,
    )


def _is_cwd(path: Path) -> bool:
    """Whether ``path`` is runner's working directory (runner never changes it)."""
    try:
        return os.path.samestat(os.stat(path), os.stat("."))
    except OSError:
        return False


def _inheritable_fds() -> list[int] | None:
    """Descriptors above 2 a command would inherit (None: no /proc to list them). Python makes
    its own non-inheritable, so these are the ones runner was started with (a shell's `3>file`,
    a jobserver's pipe). Popen's close_fds closes them; the posix_spawn path, by name."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
                if os.get_inheritable(fd):
                    found.append(fd)
    return found


@functools.cache
def _devnull() -> int:
    """One /dev/null for every command's stdin (not inherited: the child gets a copy as fd 0)."""
    return os.open(os.devnull, os.O_RDONLY)


class _Captured:
    """One stream of a command, captured in an anonymous file: a memory file (~3 µs to make)
    where there is one, else an unlinked temporary file (~85 µs). A raw descriptor: file
    objects around it would cost more than the reads."""

    def __init__(self) -> None:
        self.fd = -1

    def __enter__(self) -> _Captured:
        if hasattr(os, "memfd_create"):
            with contextlib.suppress(OSError):
                self.fd = os.memfd_create("runner-capture", os.MFD_CLOEXEC)
                return self
        self.fd, path = tempfile.mkstemp(prefix="runner-capture-")
        os.unlink(path)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def contents(self, keep: int | None) -> bytes:
        """What was written: all of it, or its last ``keep`` bytes."""
        size = os.fstat(self.fd).st_size
        pos = size - keep if keep is not None and size > keep else 0
        chunks = []
        while pos < size:  # one read, unless the output is over a gigabyte
            chunk = os.pread(self.fd, min(size - pos, 1 << 30), pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)
