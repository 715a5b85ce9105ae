"""`runner server status|stop`: the warm servers of this user, asked through their sockets."""

from __future__ import annotations

import _socket
import os
from typing import Any

from . import fit, wire


def sockets(folder: str | None = None) -> list[str]:
    """The server sockets in this user's socket directory."""
    folder = folder or fit.socket_dir()
    if folder is None:
        return []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.endswith(".sock")]


def ask(path: str, op: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """A server's answer to ``op`` ("status", "stop"); None when none listens there (a socket
    left by a server that was killed is removed)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            _remove_dead(path)
            return None
        wire.send(sock, {"op": op})
        answer = wire.receive(sock)
        return None if answer is None else answer[0]
    except (OSError, ValueError, EOFError):
        return None
    finally:
        sock.close()


def _remove_dead(path: str) -> None:
    """A socket no server listens on: removed unless a server holds its lock (starting)."""
    import fcntl

    try:
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
    except OSError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


def statuses(folder: str | None = None) -> list[dict[str, Any]]:
    return [s for s in (ask(p, "status") for p in sockets(folder)) if s is not None]


def stop_all(folder: str | None = None) -> list[dict[str, Any]]:
    """Ask every server to stop: each stops listening at once and leaves when the applies it
    runs have ended. Returns what each said."""
    out = []
    for path in sockets(folder):
        answer = ask(path, "stop")
        if answer is not None:
            out.append({"socket": path, **answer})
    return out
