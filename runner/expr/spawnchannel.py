"""One spawner's channel: requests go out numbered, answers come back to whoever waits for them.

Runner keeps one SOCK_SEQPACKET socket to each spawner (runner/expr/confined.py) for the whole
process: a request is one message ``iID`` + its fields (the three streams go with it), a kill is
``kID``, and the spawner answers ``exit ID STATUS`` or ``error ID WHY`` on the same socket
(runner/expr/_spawner.py's docstring). Before, each command had a socket pair of its own for its
answer: a socketpair, a fourth descriptor sent, an epoll registration and removal and two closes,
~30 us of runner's CPU a command of the ~240 its start and end cost (issue 43).

Several event loops may wait on one spawner at once (watch and serve run applies from threads of
their own). Each loop with an answer pending reads the socket (a reader registered while it has
one); whichever reads an answer hands it to the loop that waits for it. The socket's end (the
spawner died or was closed) answers every request still waiting with nothing, which
``confined`` says as the spawner ending without saying how the command ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading

_ANSWER = 8192  # (the C loop's longest: an errno's text and a path)
_KILL_WAIT = 5.0
_ids = itertools.count(1)  # process-wide: one number is never two requests, on any spawner


class _Wait:
    """One request's wait: the loop and future its answer goes to, and the answer once read
    (kept here too: a future a timeout or a cancel ended takes none, and the kill that follows
    must know the command already ended)."""

    __slots__ = ("future", "loop", "said")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[bytes] = loop.create_future()
        self.said: bytes | None = None


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock  # blocking: a send waits (the spawner reads as requests come)
        self._fd = sock.fileno()
        self._lock = threading.Lock()  # the tables below: several threads' loops use them
        self._waiting: dict[int, _Wait] = {}
        self._pending: dict[asyncio.AbstractEventLoop, int] = {}  # loop: its requests waiting
        self._reading: set[asyncio.AbstractEventLoop] = set()  # loops with the reader registered
        self._ended = False
        self._closing = False

    async def ask(self, header: bytes, fds: list[int], timeout: float | None) -> bytes | None:
        """Send one request (its fields, its descriptors) and wait for its answer: ``exit
        STATUS`` or ``error WHY`` (b"" when the spawner ended first); None when ``timeout`` ran
        out (the command's group is then killed). A cancel kills the group and propagates.
        Raises OSError (BrokenPipeError: the spawner is gone) when the request cannot be sent,
        before anything waits."""
        loop = asyncio.get_running_loop()
        rid = next(_ids)
        wait = self._expect(rid, loop)  # (before the send: another loop may read the answer)
        try:
            socket.send_fds(self.sock, [b"i%d\0" % rid + header], fds)
            try:
                if timeout is None:
                    return await wait.future
                try:
                    return await asyncio.wait_for(wait.future, timeout)
                except TimeoutError:
                    await self._kill(rid, wait)
                    return None
            except asyncio.CancelledError:
                await asyncio.shield(self._kill(rid, wait))
                raise
        finally:
            self._done(rid, loop)

    def close(self) -> None:
        """End the channel: the spawner reads its end (and ends what runs); every request still
        waiting is answered with nothing. The descriptor is closed once no loop reads it."""
        with self._lock:
            self._closing = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            if not self._reading:
                self.sock.close()
        self._end()

    def _expect(self, rid: int, loop: asyncio.AbstractEventLoop) -> _Wait:
        wait = _Wait(loop)
        with self._lock:
            if self._ended or self._closing:  # (ended since it was handed out: a new one)
                raise BrokenPipeError("the sandbox's spawner has ended")
            self._waiting[rid] = wait
            self._pending[loop] = self._pending.get(loop, 0) + 1
            if loop not in self._reading:
                loop.add_reader(self._fd, self._readable, loop)
                self._reading.add(loop)
        return wait

    def _done(self, rid: int, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._waiting.pop(rid, None)
            left = self._pending[loop] - 1
            if left:
                self._pending[loop] = left
                return
            del self._pending[loop]
            self._unread(loop)

    def _unread(self, loop: asyncio.AbstractEventLoop) -> None:
        """(lock held) ``loop`` stops reading; the last to stop closes a closed channel's
        descriptor (closed while registered, its number could be another file's)."""
        if loop in self._reading:
            self._reading.discard(loop)
            loop.remove_reader(self._fd)
        if self._closing and not self._reading:
            self.sock.close()

    async def _kill(self, rid: int, wait: _Wait) -> None:
        """Kill request ``rid``'s group and wait (briefly) until the spawner saw it end."""
        with self._lock:
            if wait.said is not None:  # it ended already (or the spawner did)
                return
            wait.future = wait.loop.create_future()
        with contextlib.suppress(OSError):
            self.sock.send(b"k%d\0" % rid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait.future, _KILL_WAIT)

    def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        """(on ``loop``) One answer, to the loop waiting for it (the selector calls again while
        more are there: one recv an answer, not a second one told there is none)."""
        try:
            said = self.sock.recv(_ANSWER, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):  # (another loop read it)
            return
        except OSError:
            said = b""
        if not said:  # the spawner's end: nothing more will be answered
            with self._lock:
                self._unread(loop)
            self._end()
            return
        word, _, rest = said.partition(b" ")
        rid, _, why = rest.partition(b" ")
        with self._lock:
            wait = self._waiting.get(int(rid)) if rid.isdigit() else None
            if wait is None or wait.said is not None:
                return
            wait.said = word + b" " + why
        _answer(wait, loop)

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            answered = []
            for wait in self._waiting.values():
                if wait.said is None:
                    wait.said = b""
                    answered.append(wait)
        current = _running_loop()
        for wait in answered:
            _answer(wait, current)


def _answer(wait: _Wait, current: asyncio.AbstractEventLoop | None) -> None:
    """Settle ``wait``'s future with its answer, in its own loop."""
    if wait.loop is current:
        _settle(wait)
    else:
        with contextlib.suppress(RuntimeError):  # (its loop closed: nothing waits there)
            wait.loop.call_soon_threadsafe(_settle, wait)


def _settle(wait: _Wait) -> None:
    if not wait.future.done() and wait.said is not None:
        wait.future.set_result(wait.said)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
