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

A simple command -- words no shell would expand, at most a few `<`, `>` and `>>` -- is started
without the shell where /bin/sh is dash, as make runs a command without shell syntax: the shell's
own start, its fork and its wait were half of such a command's cost (~0.5 ms of ~1.1). Runner does
then what dash would do: the redirections in order, the PATH search, the environment dash exports
(see _exports), and a signal that ends the command said as dash says it (code 128+N, its name on
stderr). Whatever it cannot start that way (no such command, a redirection that fails, a script
without `#!`) is handed to /bin/sh, which does it again and reports it in its own words.

The command runs in a new session, so it and everything it starts form one process group: on a
timeout, a cancel, or a normal exit that left background children, the whole group is killed.

Under the engine a command holds one of the run's ``--jobs`` slots while its process runs, and
only then (commandslot.py): what runner does before and after it (the key, storing the
outputs, the journal) is done on the event loop's one thread, and the next command waiting for
a slot starts while it is done (in a model of a 1,000-command fan-out with 0.6 ms of such
work a command: 1.04 -> 0.94 s; see bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .commandslot import command_slot

if TYPE_CHECKING:
    from .confined import Confinement


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
    confine: Confinement | None = None,
) -> Finished:
    """Run ``/bin/sh -c command`` in ``cwd``; its output is captured (the last ``keep`` bytes of
    each stream when given, else all of it). ``confine``: what it may read, write and reach
    (runner/expr/confined.py), where this machine has a sandbox.

    Raises OSError when the shell cannot start. A cancel kills the process group and propagates.
    """
    if confine is not None:
        from . import confined

        if confined.status().confines:
            return await _run_confined(command, cwd, env, timeout, keep, confine)
    hold = command_slot.get()
    with _Captured() as out, _Captured() as err:
        simple = _simple(command, env) if _direct_possible(cwd) else None
        async with hold() if hold is not None else contextlib.nullcontext():
            proc: _Child | None = None
            if simple is not None:
                proc = _spawn_simple(simple, env, out.fd, err.fd)
            if proc is None:
                simple = None
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
        stderr = err.contents(keep)
        if simple is not None and code is not None and code < 0:
            code, said = _as_dash_says(proc)
            stderr = (stderr + said)[-keep:] if keep else stderr + said
        return Finished(code, out.contents(keep), stderr)


async def _run_confined(
    command: str,
    cwd: Path,
    env: Mapping[str, str] | None,
    timeout: float | None,
    keep: int | None,
    confine: Confinement,
) -> Finished:
    """run_shell through the sandbox's spawner: the same command, streams and direct start."""
    from .confined import run_confined

    hold = command_slot.get()
    source = os.environ if env is None else env
    with _Captured() as out, _Captured() as err:
        direct: dict[str, object] | None = None
        simple = _simple(command, env) if _direct_possible(cwd) else None
        if simple is not None:
            # The spawner's child looks the program up along PATH, as _command_path does
            # here: ~14 stats a command off the event loop. None found: the shell runs it.
            direct = {
                "path": simple.argv[0],
                "search": source.get("PATH", _DASH_PATH),
                "argv": simple.argv,
                "env": _exports(source),
                "redirects": [list(r) for r in simple.redirects],
            }
        async with hold() if hold is not None else contextlib.nullcontext():
            ended = await run_confined(
                command,
                cwd=cwd,
                env=source,
                direct=direct,
                confine=confine,
                stdin=_devnull(),
                out=out.fd,
                err=err.fd,
                timeout=timeout,
            )
        code = None if ended is None else os.waitstatus_to_exitcode(ended)
        stderr = err.contents(keep)
        if direct is not None and ended is not None and code is not None and code < 0:
            code, said = _as_dash_says(_Ended(ended))
            stderr = (stderr + said)[-keep:] if keep else stderr + said
        return Finished(code, out.contents(keep), stderr)


class _Ended:
    """A confined command's end, as _as_dash_says reads a _Spawned."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.returncode = os.waitstatus_to_exitcode(status)
        self.pid = 0

    def wait(self) -> int:
        return self.returncode


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
        self.status = 0  # the raw wait status (whether a core was dumped)
        self._lock = threading.Lock()

    def wait(self) -> int:
        with self._lock:
            if self.returncode is None:
                try:
                    _, self.status = os.waitpid(self.pid, 0)
                except ChildProcessError:  # reaped by someone else: Popen says 0 too
                    self.status = 0
                self.returncode = os.waitstatus_to_exitcode(self.status)
            return self.returncode


# Signals Python ignores that a command must get with their default action (SIGPIPE ends
# `yes | head`'s yes), as Popen's restore_signals does.
_DEFAULT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)
# And those a shell ignores in what it starts in the background (`runner apply ... &` from a
# script, nohup-like launchers), which an ignored disposition would pass on through exec: a
# command runs in its own session, out of reach of the terminal's ^C that the ignoring guards
# against, so it gets them with their default action however runner was started. Otherwise a
# step's result (a `kill -INT`, `timeout -s INT`, a tool's own SIGINT) would depend on how
# runner was launched, and /bin/sh could not undo it: a signal ignored on entry stays ignored.
_JOB_SIGNALS = (signal.SIGINT, signal.SIGQUIT)


def _reset_job_signals() -> None:
    """In the child before exec (the Popen path, only when one is ignored): default action."""
    for number in _JOB_SIGNALS:
        signal.signal(number, signal.SIG_DFL)


def _spawn(argv: list[str], cwd: Path, env: Mapping[str, str] | None, out: int, err: int) -> _Child:
    stdin = _devnull()
    inherited = _inheritable_fds() if hasattr(os, "pidfd_open") and _is_cwd(cwd) else None
    if inherited is not None and min(stdin, out, err) > 2:
        return _Spawned(_posix_spawn(argv[0], argv, env, inherited, stdin, out, err))
    # A preexec_fn costs a Python call between fork and exec: only when there is one to undo.
    ignored = any(signal.getsignal(n) == signal.SIG_IGN for n in _JOB_SIGNALS)
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=stdin,
        stdout=out,
        stderr=err,
        start_new_session=True,
        preexec_fn=_reset_job_signals if ignored else None,
    )


def _posix_spawn(
    path: str,
    argv: list[str],
    env: Mapping[str, str] | None,
    inherited: list[int],
    stdin: int,
    out: int,
    err: int,
    redirects: tuple[tuple[int, str, int], ...] = (),
) -> int:
    """Start ``path`` with the three streams, no inherited descriptor, then ``redirects``
    (descriptor, file, open flags) opened in order, as the shell opens them. Raises OSError."""
    return os.posix_spawn(
        path,
        argv,
        os.environ if env is None else env,
        file_actions=[
            *((os.POSIX_SPAWN_CLOSE, fd) for fd in inherited),
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, out, 1),
            (os.POSIX_SPAWN_DUP2, err, 2),
            *((os.POSIX_SPAWN_OPEN, fd, name, flags, 0o666) for fd, name, flags in redirects),
        ],
        setsid=True,
        setsigdef=(*_DEFAULT_SIGNALS, *_JOB_SIGNALS),
    )


# -- simple commands, without the shell --------------------------------------------------------

# What a simple command may hold: characters no shell expands or treats as syntax (no quote,
# `$`, glob, `~`, `#`, `;`, `&`, `|`, parenthesis, brace, backslash or newline), blanks, and
# `<`/`>`, which must stand alone as `<`, `>` or `>>` before a file's name.
_SIMPLE = re.compile(r"[A-Za-z0-9_./,:@%+=<> \t-]*")
_WORD = re.compile(r"[A-Za-z0-9_./,:@%+=-]+")
# A command's name: no `=` (an assignment), nothing a shell could take for syntax or a job.
_NAME = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]*")
_REDIRECTS = {
    "<": (0, os.O_RDONLY),
    ">": (1, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ">>": (1, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
}
# A word that is exactly one value's reference, as shellenv writes a bare one (whitespace-free).
_VALUE_WORD = re.compile(r'"\$\{(RUNNER_VALUE_[0-9]+)\}"')
# Names a shell answers itself (builtins and keywords of dash, bash and POSIX): left to it.
_SHELL_WORDS = frozenset((
    ".", ":", "alias", "bg", "bind", "break", "builtin", "caller", "case", "cd", "chdir",
    "command", "compgen", "complete", "compopt", "continue", "declare", "dirs", "disown", "do",
    "done", "echo", "elif", "else", "enable", "esac", "eval", "exec", "exit", "export", "false",
    "fc", "fg", "fi", "for", "function", "getopts", "hash", "help", "history", "if", "in", "jobs",
    "kill", "let", "local", "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read",
    "readarray", "readonly", "return", "select", "set", "shift", "shopt", "source", "suspend",
    "test", "then", "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask",
    "unalias", "unset", "until", "wait", "while",
))  # fmt: skip
# The search path dash uses when the environment has no PATH (it does not export it).
_DASH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class _Simple:
    argv: list[str]
    redirects: tuple[tuple[int, str, int], ...]  # (descriptor, file, open flags), in order


def _simple(command: str, env: Mapping[str, str] | None = None) -> _Simple | None:
    """``command`` as words and redirections when no shell would expand or interpret any of
    it further, else None. A word that is only a value's reference (``"${RUNNER_VALUE_1}"``,
    runner/expr/shellenv.py) is the value itself, as dash expands it: one word, as it is."""
    checked = _VALUE_WORD.sub("v", command) if '"${' in command else command
    if _SIMPLE.fullmatch(checked.strip("\n")) is None:  # (a newline inside: two commands)
        return None
    argv: list[str] = []
    redirects: list[tuple[int, str, int]] = []
    tokens = iter(command.split())
    for token in tokens:
        redirect = _REDIRECTS.get(token)
        if redirect is not None:
            name = next(tokens, None)
            if name is not None and name[:1] == '"':
                name = _value_of(name, env)  # a value: the file's name, whatever it holds
            elif name is not None and _WORD.fullmatch(name) is None:
                name = None
            if name is None:
                return None
            redirects.append((redirect[0], name, redirect[1]))
        elif token[:1] == '"':
            value = _value_of(token, env)
            if value is None:
                return None
            argv.append(value)
        elif _WORD.fullmatch(token) is None:
            return None  # `<` or `>` inside a word (`2>err`, `>out`)
        else:
            argv.append(token)
    if not argv or _NAME.fullmatch(argv[0]) is None or argv[0] in _SHELL_WORDS:
        return None
    return _Simple(argv, tuple(redirects))


def _value_of(token: str, env: Mapping[str, str] | None) -> str | None:
    """The value a word that is one whole reference expands to (None: not one, or unset)."""
    m = _VALUE_WORD.fullmatch(token)
    return None if m is None or env is None else env.get(m.group(1))


@functools.cache
def _sh_is_dash() -> bool:
    """Whether /bin/sh is dash, the shell whose behaviour the direct start reproduces."""
    return os.path.basename(os.path.realpath("/bin/sh")) == "dash"


def _direct_possible(cwd: Path) -> bool:
    return hasattr(os, "pidfd_open") and _sh_is_dash() and _is_cwd(cwd)


def _spawn_simple(
    simple: _Simple, env: Mapping[str, str] | None, out: int, err: int
) -> _Spawned | None:
    """Start a simple command as dash would, without dash; None when it cannot start so (dash
    then runs it, and says why it fails if it does)."""
    stdin, inherited = _devnull(), _inheritable_fds()
    if inherited is None or min(stdin, out, err) <= 2:
        return None
    if not all(_opens_at_once(name, flags) for _fd, name, flags in simple.redirects):
        return None
    source = os.environ if env is None else env
    path = _command_path(simple.argv[0], source.get("PATH", _DASH_PATH))
    if path is None:
        return None
    exported = _exports(source)
    try:
        pid = _posix_spawn(
            path, simple.argv, exported, inherited, stdin, out, err, simple.redirects
        )
    except OSError:  # a redirection's file, a script without #!, an unreadable binary...
        return None
    return _Spawned(pid)


def _opens_at_once(name: str, flags: int) -> bool:
    """Whether opening a redirection's file cannot wait: a regular file (or none yet, to be
    created), or /dev/null. A FIFO's open waits for the other end, and here it would wait inside
    posix_spawn, holding the event loop (the other end may be a command runner has yet to
    start); dash opens it in its own process."""
    if name == "/dev/null":
        return True
    try:
        return stat.S_ISREG(os.stat(name).st_mode)
    except FileNotFoundError:
        return bool(flags & os.O_CREAT)
    except OSError:
        return False


def _command_path(name: str, search: str) -> str | None:
    """The file dash would execute for ``name``: the first regular, executable file along
    ``search`` (an empty entry is the working directory), or the name itself with a `/`."""
    candidates = [name] if "/" in name else [f"{d or '.'}/{name}" for d in search.split(":")]
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
            return path
    return None


def _exports(env: Mapping[str, str]) -> dict[str, str]:
    """The environment dash hands a command it was given ``env``: names that are not shell
    variable names dropped; PWD the working directory (the given one when it names it);
    IFS, OPTIND and PPID, when present, dash's own values."""
    # (str methods: a regular expression per name cost as much as the rest of the start)
    exported = {k: v for k, v in env.items() if k.isidentifier() and k.isascii()}
    pwd = exported.get("PWD", "")
    if not (pwd.startswith("/") and _same_file(pwd, ".")):
        exported["PWD"] = os.getcwd()
    for name, value in (("IFS", " \t\n"), ("OPTIND", "1"), ("PPID", str(os.getpid()))):
        if name in exported:
            exported[name] = value
    return exported


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return False


def _as_dash_says(proc: _Child) -> tuple[int, bytes]:
    """A command a signal ended, reported as dash reports it: exit code 128+N and, unless the
    signal was SIGINT or SIGPIPE, the signal's name on stderr."""
    number = -(proc.returncode or 0)
    said = b""
    if number not in (signal.SIGINT, signal.SIGPIPE):
        name = signal.strsignal(number) or f"Signal {number}"
        dumped = isinstance(proc, (_Spawned, _Ended)) and os.WCOREDUMP(proc.status)
        said = f"{name}{' (core dumped)' if dumped else ''}\n".encode()
    return 128 + number, said


def _is_cwd(path: Path) -> bool:
    """Whether ``path`` is runner's working directory (runner never changes it)."""
    try:
        return os.path.samestat(os.stat(path), os.stat("."))
    except OSError:
        return False


def _inheritable_fds() -> list[int] | None:
    """Descriptors above 2 a command would inherit (None: no /proc to list them). Python makes
    its own non-inheritable, so these are the ones runner was started with (a shell's `3>file`,
    a jobserver's pipe). Popen's close_fds closes them; the posix_spawn path, by name. Looked
    at for every command (code in this process could make one); a plain loop, ~24 us a
    command with two dozen open (contextlib.suppress per descriptor made it ~36)."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    inheritable = os.get_inheritable
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if inheritable(fd):
                    found.append(fd)
            except OSError:  # the listing's own descriptor, closed since
                pass
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
