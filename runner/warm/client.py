"""A command's side of the warm server: hand the apply over, relay signals, leave as it left.

Runs before anything else `runner` imports, so it uses the interpreter's C modules (_socket,
_signal, marshal) and not their Python wrappers (socket and signal import enum: ~3 ms).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (signal imports enum)
import _socket
import os
import sys
import time

from . import fit, wire

TYPE_CHECKING = False  # typing itself is ~5 ms of a command's start (it imports re)
if TYPE_CHECKING:
    from typing import Any, NoReturn

# Signals a command relays to the server's child: what a terminal, `timeout`, `kill` or a
# supervisor sends to stop, hang up, resize or poke a process. Job control (SIGTSTP, SIGCONT)
# is relayed too, by _Relay; faults (SIGSEGV ...) and SIGCHLD are the command's own.
RELAYED = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH")

OFF_SECONDS = 3600  # how long a server's "cannot serve this set-up" holds
MAX_SERVERS = 8  # a user's servers at once (~50 MB each); beyond, commands run themselves


def run(argv: list[str], entry: str) -> int | None:
    """Run ``runner <argv>`` in a warm server's child, where ``entry`` ("module:function", the
    console command's body) runs it, and return its exit status (or end this process by the
    signal that ended it); None when this process should run it itself, nothing having been run
    (no server may answer, none is there yet, or it refused)."""
    if not argv or argv[0] != "apply" or not fit.enabled():
        return None
    ident = fit.identity()
    folder = fit.socket_dir() if ident is not None else None
    if ident is None or folder is None:
        return None
    path = fit.socket_path(folder, ident)
    request = _request(ident)
    if request is None:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        start(path, entry)
        return None
    try:
        return _handed_over(sock, path, request, entry)
    finally:
        sock.close()


def _handed_over(
    sock: _socket.socket, path: str, request: dict[str, Any], entry: str
) -> int | None:
    try:
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # a deleted directory: the command itself says so
    # The signals to relay wait (blocked) until the child's pid is known and they can be sent
    # on; the request holds the mask as it was, which is the child's.
    held = {getattr(_signal, name) for name in (*RELAYED, "SIGTSTP", "SIGCONT")}
    _signal.pthread_sigmask(_signal.SIG_BLOCK, held)
    try:
        try:
            wire.send(sock, request, [0, 1, 2, cwd])
            answer = wire.receive(sock)
        except (OSError, ValueError, EOFError):
            answer = None
        finally:
            os.close(cwd)
        if answer is None or "pid" not in answer[0]:
            if answer is not None and answer[0].get("refused") == "stale":
                start(path, entry)  # the old one is leaving: the next command finds a new one
            return None
        relay = _Relay(answer[0]["pid"])
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, request["blocked"])
    try:
        ended = wire.receive(sock)
    except (OSError, ValueError, EOFError):
        ended = None
    finally:
        relay.restore()
    if ended is None or "status" not in ended[0]:
        os.write(
            2,
            b"runner: the warm server ended before the apply did (RUNNER_SERVER=0 runs "
            b"applies without it)\n",
        )
        return 1
    code = os.waitstatus_to_exitcode(ended[0]["status"])
    if code < 0:
        _die_by(-code)
    return code


def _request(ident: bytes) -> dict[str, Any] | None:
    """What makes this process the one it is, beyond ``ident``; None when a standard stream is
    closed (the command's own run reports what that does)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return None
    import resource

    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    }
    umask = os.umask(0o022)
    os.umask(umask)
    return {
        "op": "apply",
        "identity": ident,
        "argv": list(sys.argv),
        "orig_argv": list(sys.orig_argv),
        "environ": dict(os.environb),
        "umask": umask,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "limits": limits,
        "ignored": [s for s in _signal.valid_signals() if _ignored(s)],
        "blocked": list(_signal.pthread_sigmask(_signal.SIG_BLOCK, [])),
    }


def _ignored(signum: int) -> bool:
    try:
        return bool(_signal.getsignal(signum) == _signal.SIG_IGN)
    except (OSError, ValueError):
        return False


class _Relay:
    """Sends the signals this command gets to the child running its apply, while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before: dict[int, Any] = {}
        for name in RELAYED:
            signum = getattr(_signal, name)
            if not _ignored(signum):  # ignored here (nohup): the child ignores it too
                self.before[signum] = _signal.signal(signum, self._relay)
        if not _ignored(_signal.SIGTSTP):
            self.before[_signal.SIGTSTP] = _signal.signal(_signal.SIGTSTP, self._stop)
            self.before[_signal.SIGCONT] = _signal.signal(_signal.SIGCONT, self._continue)

    def _relay(self, signum: int, _frame: object) -> None:
        self._send(signum)

    def _stop(self, _signum: int, _frame: object) -> None:
        """Ctrl-Z: the child stops, then this command (as a terminal stops its foreground
        group); the shell's `fg` continues this command, which continues the child. SIGSTOP:
        the child's group is in a session without a terminal, where SIGTSTP is discarded."""
        self._send(_signal.SIGSTOP)
        _signal.signal(_signal.SIGTSTP, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGTSTP)
        _signal.signal(_signal.SIGTSTP, self._stop)

    def _continue(self, _signum: int, _frame: object) -> None:
        self._send(_signal.SIGCONT)

    def _send(self, signum: int) -> None:
        try:  # noqa: SIM105 - contextlib is an import this path does without
            os.kill(self.pid, signum)
        except OSError:
            pass  # already ended: its status is on its way

    def restore(self) -> None:
        for signum, handler in self.before.items():
            _signal.signal(signum, handler)


def _die_by(signum: int) -> NoReturn:
    """End this process by ``signum``, as the child's apply ended, so a shell or supervisor sees
    the same (`Killed`, 128 + N)."""
    sys.stdout.flush()
    _signal.signal(signum, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def start(path: str, entry: str) -> None:
    """Start a server for this process's set-up in the background, in a session of its own, its
    standard streams /dev/null (never this command's pipes). Nothing when one said it cannot
    serve this set-up (``<socket>.off``, in the last hour)."""
    try:
        if os.stat(path[: -len(".sock")] + ".off").st_mtime > time.time() - OFF_SECONDS:
            return
    except OSError:
        pass
    try:
        running = [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".sock")]
    except OSError:
        running = []
    if len(running) >= MAX_SERVERS:
        return  # one per set-up; `python -m runner` in many folders would keep many
    code = (
        "import sys, marshal; sys.path[:] = marshal.loads(bytes.fromhex(sys.argv[2])); "
        "from runner.warm.server import main; main(sys.argv[1], sys.argv[3])"
    )
    import marshal

    argv = [sys.executable, *interpreter_options(sys.orig_argv), "-c", code, path]
    argv += [marshal.dumps(list(sys.path)).hex(), entry]
    null = os.devnull
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0),
    ]
    try:  # noqa: SIM105 - contextlib is an import this path does without
        os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions, setsid=True)
    except OSError:
        pass  # no server: every command runs itself, as before


def interpreter_options(orig_argv: list[str]) -> list[str]:
    """The options the interpreter was started with (``-X importtime``, ``-W error``, ``-I``),
    without the program, module or code they preceded."""
    out: list[str] = []
    rest = iter(orig_argv[1:])
    for arg in rest:
        if arg in ("-c", "-m") or arg == "-" or not arg.startswith("-"):
            break
        out.append(arg)
        if arg in ("-X", "-W"):
            out.append(next(rest, ""))
    return out
