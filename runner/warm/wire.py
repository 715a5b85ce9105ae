"""The messages between a command and its warm server: a 4-byte length, then a marshalled value
(dicts, lists, bytes, str, int: both ends are the same interpreter, ``fit.identity``). The
command's first message carries its standard streams and working directory as descriptors.

marshal makes values, never runs them; the socket's directory is the user's own and the server
takes only its own user's connections (SO_PEERCRED)."""

from __future__ import annotations

import _socket
import marshal
import sys

TYPE_CHECKING = False  # typing itself is ~5 ms of a command's start (it imports re)
if TYPE_CHECKING:
    from typing import Any

_MAX = 16 << 20  # an environment and argv far beyond any real one
_INT = 4


def send(sock: _socket.socket, value: Any, fds: list[int] | None = None) -> None:
    body = marshal.dumps(value)
    data = len(body).to_bytes(_INT, "big") + body
    if fds:
        rights = b"".join(fd.to_bytes(_INT, sys.byteorder) for fd in fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        data = data[sent:]
    if data:
        sock.sendall(data)


def receive(sock: _socket.socket, want_fds: int = 0) -> tuple[Any, list[int]] | None:
    """The next message and the descriptors that came with it; None at the end of the stream."""
    fds: list[int] = []
    head = b""
    if want_fds:
        space = _socket.CMSG_SPACE(want_fds * _INT)
        head, ancillary, _flags, _addr = sock.recvmsg(_INT, space)
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(data) - len(data) % _INT
                fds += [
                    int.from_bytes(data[i : i + _INT], sys.byteorder)
                    for i in range(0, usable, _INT)
                ]
    try:
        head += _exactly(sock, _INT - len(head))
        if len(head) < _INT:
            raise EOFError
        size = int.from_bytes(head, "big")
        if size > _MAX:
            raise ValueError(f"a message of {size} bytes")
        body = _exactly(sock, size)
        if len(body) < size:
            raise EOFError
    except EOFError:
        for fd in fds:
            _close(fd)
        if not head:
            return None
        raise
    return marshal.loads(body), fds


def _exactly(sock: _socket.socket, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = sock.recv(size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _close(fd: int) -> None:
    import os

    try:  # noqa: SIM105 - contextlib is an import this path does without
        os.close(fd)
    except OSError:
        pass
