"""ComfyUI's /ws websocket: progress while a job runs, and a wake-up the moment it ends.

Protocol (ComfyUI's server.py, execution.py, main.py): GET /ws?clientId=SID upgrades to a
websocket; a prompt's messages go only to the socket whose id is the ``client_id`` of its
POST /prompt, so every call uses its own id (two calls sharing one would steal each other's
socket: ComfyUI keeps one socket per id). Text messages are ``{"type", "data"}``:
status (queue length, to everyone), execution_start, execution_cached, executing {node},
progress {value, max, node, prompt_id} per sampler step, executed {node, output},
execution_success / execution_error / execution_interrupted, and last ``executing`` with
``node: null``, sent after the history entry is written. Binary frames are previews (a 4-byte
big-endian event type: 1 an image after a 4-byte image type, 4 an image after 4-byte-length JSON
metadata, 3 text); they are skipped.

The socket is only a hint: the job's end is always confirmed by GET /history, and a backend
without /ws, or a socket that drops, leaves the wait to polling. ``websockets`` is imported
here, when a ComfyUI job waits, never on the way to a run that does not use ComfyUI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

# Preview frames of a large image can be a few MB; anything bigger is not ComfyUI talking.
MAX_MESSAGE = 32 * 1024 * 1024


def ws_url(base_url: str, client_id: str) -> str:
    """ws(s)://host[:port][/prefix]/ws?clientId=ID for an http(s) base URL."""
    scheme, _, rest = base_url.rstrip("/").partition("://")
    ws_scheme = "wss" if scheme.lower() == "https" else "ws"
    return f"{ws_scheme}://{rest}/ws?clientId={quote(client_id, safe='')}"


class ProgressSocket:
    """One call's socket: says progress lines for the watched prompt, wakes its waiter."""

    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn
        self.alive = True
        self.prompt_id: str | None = None
        self._say: Callable[[str], object] = lambda line: None
        self._where = ""
        self._final: set[str] = set()  # prompts whose closing ``executing: null`` arrived
        self._wake = asyncio.Event()
        self._shown: tuple[str, Any, int] | None = None  # (node, max, tenth) last said
        self.progress: list[tuple[float, float]] = []  # (value, max) as they arrived
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(
        cls, base_url: str, client_id: str, headers: dict[str, str], timeout: float
    ) -> ProgressSocket | None:
        """The socket, or None when the backend offers none (then the caller polls)."""
        try:
            from websockets.asyncio.client import connect
            from websockets.exceptions import WebSocketException
        except ImportError:  # pragma: no cover - a dependency; polling still works without it
            return None
        try:
            conn = await connect(
                ws_url(base_url, client_id),
                additional_headers=headers,
                open_timeout=timeout,
                close_timeout=1,
                max_size=MAX_MESSAGE,
                proxy=None,  # as the HTTP client: no proxy from the environment
                user_agent_header=headers.get("User-Agent"),
            )
        except (OSError, TimeoutError, WebSocketException, ValueError):
            return None
        return cls(conn)

    def watch(self, prompt_id: str, say: Callable[[str], object], where: str) -> None:
        if prompt_id != self.prompt_id:
            self.prompt_id, self._shown = prompt_id, None
        self._say, self._where = say, where

    async def wait(self, seconds: float) -> None:
        """Until the watched prompt ends, the socket drops, or ``seconds`` pass."""
        if self.prompt_id in self._final:
            self._final.discard(self.prompt_id)  # once: the history has it from now on
            return
        if not self.alive:
            return
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(seconds, 0.0))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._conn.close(), 2.0)

    async def _read(self) -> None:
        try:
            async for message in self._conn:
                if isinstance(message, str):  # bytes: a preview frame, not ours to show
                    self._handle(message)
        except Exception:  # a dropped socket, whatever the way: polling takes over
            pass
        finally:
            self.alive = False
            self._wake.set()

    def _handle(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        data = message.get("data") if isinstance(message, dict) else None
        if not isinstance(data, dict) or self.prompt_id is None:
            return
        if data.get("prompt_id") != self.prompt_id:
            return  # another prompt's, or a message without one
        kind = message.get("type")
        if kind == "executing" and data.get("node") is None:
            self._final.add(self.prompt_id)
            self._wake.set()
        elif kind == "progress":
            self._progress(data)

    def _progress(self, data: dict[str, Any]) -> None:
        value, maximum = data.get("value"), data.get("max")
        numbers = (int, float)
        if not isinstance(value, numbers) or not isinstance(maximum, numbers) or maximum <= 0:
            return
        self.progress.append((float(value), float(maximum)))
        node = str(data.get("node"))
        tenth = int(10 * min(value, maximum) / maximum)
        # One line per tenth of each sampler's run: enough to follow, not a line per step.
        if self._shown != (node, maximum, tenth):
            self._shown = (node, maximum, tenth)
            self._say(
                f"prompt {self.prompt_id} running on {self._where}: "
                f"{_num(value)}/{_num(maximum)} steps (node {node})"
            )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
