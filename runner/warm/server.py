"""The warm server: imports what an apply uses once, then forks a child per command.

Started by a command (client.start) with that command's interpreter, options, paths and
environment. It holds ``<socket>.lock`` for its life (one server per socket), imports while
recording which environment variables the imports read, forgets the environment, and listens.
Each command is checked before its child is forked (the same identity, the same values of the
variables read, no imported file changed, limits and niceness the child can take); a command
that does not fit is refused and runs itself. The server never runs an apply itself, so every
child starts from the state importing left: nothing one command did reaches the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

from . import fit, wire
from .child import become
from .imported import Imported

# What an apply imports: the command line, the engine, every built-in step type and what they
# load when they first run (templates, the shell grammar, providers' HTTP client).
PRELOAD = (
    "runner.surfaces.cli.entry",
    "runner.surfaces.cli.quickapply",
    "runner.surfaces.cli.applyrun",
    "runner.surfaces.cli.failures",
    "runner.surfaces.cli.leave",
    "runner.surfaces.cli.runend",
    "runner.surfaces.cli.base",
    "runner.surfaces.cli.commands_core",
    "runner.engine.run.apply",
    "runner.engine.plan.fastpath",
    "runner.engine.plan.noopjournal",
    "runner.engine.plan.plandoc",
    "runner.engine.run.preflight",
    "runner.pipeline.prompt_lock",
    "runner.state._schema",
    "runner.state.itemlock",
    "runner.state.written",
    "runner.surfaces.cli.console",
    "runner.expr.alone",
    "runner.expr.confined",
    "runner.expr.shellrun",
    "runner.expr.unquotable",
    "runner.expr.sandbox",
    "runner.providers.registry",
    "httpx",
)

IDLE_SECONDS = 900.0
_ACCEPT_TIMEOUT = 5.0  # a command that connects and sends nothing is dropped after this


def main(path: str, entry: str) -> None:
    """Serve the commands whose identity names ``path``, each child running ``entry`` ("module:
    function", the console command's body); returns when idle, stale or stopped."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the starting command's inherited ones (pipes)
    os.chdir("/")
    lock = _lock(path)
    if lock is None:
        return  # another server holds the socket
    ident = fit.identity()
    if (
        ident is None
        or fit.socket_path(os.path.dirname(path), ident) != path
        or not hasattr(os, "pidfd_open")  # Linux 5.3: how the server waits for its children
    ):
        # started with options that do not reproduce the command's identity
        _off(path, "this set-up cannot be served (its identity is not the command's)")
        return
    try:
        idle = _idle_seconds(os.environ.get("RUNNER_SERVER_IDLE"))
        reads = preload()
        _forget_environment()
        server = Server(path, lock, ident, reads, Imported(), idle, entry)
    except Exception as exc:
        _off(path, f"the server could not start: {type(exc).__name__}: {exc}")
        return
    server.serve()


def _off(path: str, why: str) -> None:
    """Say why no server serves this set-up, so commands stop starting one (for an hour:
    client.start)."""
    with open(path[: -len(".sock")] + ".off", "w") as f:
        f.write(why + "\n")


def _lock(path: str) -> int | None:
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    for _ in range(20):  # a stale server leaving frees it within moments
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.05)
    os.close(fd)
    return None


def preload() -> dict[bytes, bytes | None]:
    """Import PRELOAD, recording every environment variable read meanwhile (its name, and its
    value or None for unset): a command whose environment differs in one of them is refused,
    since its own imports would have read another value. Reading the whole environment (copy,
    iteration) records every variable."""
    read: set[str | bytes] = set()
    everything = False

    class Recording(os._Environ):  # type: ignore[type-arg]
        def __getitem__(self, key: Any) -> Any:
            read.add(key)
            return super().__getitem__(key)

        def __iter__(self) -> Any:
            nonlocal everything
            everything = True
            return super().__iter__()

        def copy(self) -> dict[Any, Any]:
            nonlocal everything
            everything = True
            return super().copy()

    plain: Any = type(os.environ)
    os.environ.__class__ = os.environb.__class__ = Recording
    try:
        # an optional part not installed: the child fails to import it as a command would
        for name in PRELOAD:
            with contextlib.suppress(ImportError):
                __import__(name)
        from ..steps.registry import BUILTINS

        for target in BUILTINS.values():
            with contextlib.suppress(ImportError):
                __import__(target.partition(":")[0])
    finally:
        os.environ.__class__ = os.environb.__class__ = plain
    names = set(os.environb) if everything else {os.fsencode(n) for n in read}
    names |= {n for n in os.environb if n.startswith((b"OPENSSL_", b"SSL_CERT_"))}  # read by C
    return {name: os.environb.get(name) for name in names}


def _idle_seconds(value: str | None) -> float:
    try:
        return float(value) if value else IDLE_SECONDS
    except ValueError:
        return IDLE_SECONDS


def _forget_environment() -> None:
    """Drop the starting command's environment (its secrets) from the server: each child takes
    its own command's. The initial block, what /proc/<pid>/environ shows, is wiped too."""
    from ..source.secretnames import wipe_initial_environ

    names = [os.fsdecode(n) for n in os.environb]
    wipe_initial_environ(names)
    os.environb.clear()


class Server:
    def __init__(
        self,
        path: str,
        lock: int,
        ident: bytes,
        reads: dict[bytes, bytes | None],
        imported: Imported,
        idle: float,
        entry: str,
    ) -> None:
        self.path, self.lock, self.ident, self.reads = path, lock, ident, reads
        self.imported = imported
        self.idle, self.entry = idle, entry
        self.started = time.time()
        self.served = 0
        self.refused: dict[str, int] = {}  # why commands ran themselves
        self.children_cpu = 0.0
        self.leaving = False
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
        self.listener = self._listen()

    def _listen(self) -> socket.socket:
        """Bind beside the socket's name and rename onto it: a command finds a server only once
        it has imported everything, and never a half-bound socket."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        temporary = f"{self.path}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        listener.bind(temporary)
        listener.listen(64)
        os.rename(temporary, self.path)
        self.inode = os.stat(self.path).st_ino
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        gc.freeze()  # what importing made is never collected: children share its pages
        return listener

    def serve(self) -> None:
        while True:
            timeout = None if self.children else self.idle
            events = self.selector.select(timeout)
            if not events and not self.children:
                self._leave()
                return
            for key, _mask in events:
                if key.data == "accept":
                    self._accept()
                elif key.data == "command":
                    self._command_gone(key.fileobj)  # type: ignore[arg-type]
                else:
                    self._reap(key.fd)
            if self.leaving and not self.children:
                self._leave()
                return

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(_ACCEPT_TIMEOUT)
        fds: list[int] = []
        try:
            _pid, uid, _gid = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            )
            if uid != os.getuid():
                conn.close()
                return
            got = wire.receive(conn, want_fds=4)
            if got is None:
                conn.close()
                return
            request, fds = got
            self._answer(conn, request, fds)
        except (OSError, ValueError, EOFError, KeyError, TypeError):
            conn.close()
        finally:
            for fd in fds:
                _close(fd)

    def _answer(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        op = request.get("op")
        if op == "status":
            wire.send(conn, self.status())
            conn.close()
            return
        if op == "stop":
            self._stop_listening()
            wire.send(conn, {"stopping": len(self.children)})
            conn.close()
            return
        refusal = self._refusal(request, fds)
        if refusal is not None:
            self.refused[refusal] = self.refused.get(refusal, 0) + 1
            wire.send(conn, {"refused": refusal})
            conn.close()
            if refusal == "stale":
                self._stop_listening()
            return
        pid = os.fork()
        if pid == 0:
            self._close_in_child(conn)
            become(request, fds, self.entry)  # never returns
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ, "child")
        conn.settimeout(None)
        try:
            wire.send(conn, {"pid": pid})
        except OSError:
            _kill(pid, signal.SIGTERM)  # the command left before its apply began
            raise
        self.selector.register(conn, selectors.EVENT_READ, "command")

    def _close_in_child(self, conn: socket.socket) -> None:
        """Close in a new child what is the server's (its listener, lock, other commands'
        sockets and children): through their objects, so none closes a reused number later."""
        self.selector.close()
        self.listener.close()
        conn.close()
        for pidfd, (_pid, other) in self.children.items():
            other.close()
            os.close(pidfd)
        os.close(self.lock)

    def _refusal(self, request: dict[str, Any], fds: list[int]) -> str | None:
        """Why this command's child would not be the command's own process, or None."""
        if self.leaving:
            return "leaving"
        if len(fds) != 4 or request.get("op") != "apply":
            return "malformed"
        if request["identity"] != self.ident:
            return "identity"
        if self.imported.changed() is not None:
            return "stale"
        environ = request["environ"]
        if any(environ.get(name) != value for name, value in self.reads.items()):
            return "environment"
        import resource

        for name, (_soft, hard) in request["limits"].items():
            _mine_soft, mine_hard = resource.getrlimit(getattr(resource, name))
            if _above(hard, mine_hard):
                return "limits"
        if request["nice"] < os.getpriority(os.PRIO_PROCESS, 0):
            return "nice"
        return None

    def _command_gone(self, conn: socket.socket) -> None:
        """The command's socket ended while its child runs (the command was killed): the child
        is asked to stop, as a terminal's hang-up would."""
        self.selector.unregister(conn)
        for pid, other in self.children.values():
            if other is conn:
                _kill(pid, signal.SIGTERM)

    def _reap(self, pidfd: int) -> None:
        pid, conn = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _pid, status, usage = os.wait4(pid, 0)
        self.children_cpu += usage.ru_utime + usage.ru_stime
        with contextlib.suppress(OSError):  # the command is gone
            wire.send(conn, {"status": status})
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        conn.close()

    def status(self) -> dict[str, Any]:
        own = os.times()
        return {
            "pid": os.getpid(),
            "socket": self.path,
            "started": self.started,
            "served": self.served,
            "refused": dict(self.refused),
            "running": len(self.children),
            "idle_seconds": self.idle,
            "cpu_seconds": own.user + own.system,
            "children_cpu_seconds": self.children_cpu,
            "executable": sys.executable,
            "path": list(sys.path),
        }

    def _stop_listening(self) -> None:
        if self.leaving:
            return
        self.leaving = True
        self.selector.unregister(self.listener)
        self.listener.close()
        self._unlink()

    def _unlink(self) -> None:
        try:
            if os.stat(self.path).st_ino == self.inode:  # not a newer server's socket
                os.unlink(self.path)
        except OSError:
            pass

    def _leave(self) -> None:
        if not self.leaving:
            self._unlink()
        os.close(self.lock)


def _above(limit: int, ceiling: int) -> bool:
    import resource

    infinity = resource.RLIM_INFINITY
    if ceiling == infinity:
        return False
    return limit == infinity or limit > ceiling


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
