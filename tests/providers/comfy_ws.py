"""ComfyUI's /ws websocket, as server.py, execution.py and main.py send it (facts, not code).

- GET /ws?clientId=SID upgrades to a websocket. A given clientId replaces an earlier socket of
  that id; without one the server picks a uuid4 hex. First message to the new socket:
  ``{"type": "status", "data": {"status": {"exec_info": {"queue_remaining": N}}, "sid": SID}}``;
  if SID is the client of the prompt now running, then ``executing {"node": last_node_id}``.
- A client may send ``{"type": "feature_flags", "data": {...}}`` as its first message; the
  server answers with its own feature_flags. Other client messages are ignored.
- Every message is JSON text ``{"type": EVENT, "data": {...}}``. A prompt's messages go only to
  the socket whose id is the ``client_id`` given in its POST /prompt (none if it gave none):
  execution_start {prompt_id, timestamp}, execution_cached {nodes, prompt_id, timestamp},
  executing {node, display_node, prompt_id} per node, progress {value, max, prompt_id, node}
  per sampler step, executed {node, display_node, output, prompt_id} per output node, then
  execution_success {prompt_id, timestamp} or execution_error / execution_interrupted; the
  history entry is written, ``status`` is broadcast to every socket, and last
  ``executing {"node": null, "prompt_id"}`` says the prompt is finished.
- Binary frames carry previews: a 4-byte big-endian event type, then for 1 (PREVIEW_IMAGE) a
  4-byte image type (1 JPEG, 2 PNG) and the image; for 4 (PREVIEW_IMAGE_WITH_METADATA, to
  clients that announced ``supports_preview_metadata``) a 4-byte length, that much JSON
  metadata, and the image.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .servers import Recorded, WebSocketPeer, png

SERVER_FLAGS = {"supports_preview_metadata": True, "max_upload_size": 104857600}
PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA = 1, 4


class PromptSockets:
    """The sockets of one loopback ComfyUI and what it sends on them."""

    def __init__(self, queue_remaining: Callable[[], int]) -> None:
        self.queue_remaining = queue_remaining
        self.peers: dict[str, WebSocketPeer] = {}
        self.flags: dict[str, dict[str, Any]] = {}
        self.client_id: str | None = None  # PromptServer.client_id: the running prompt's client
        self.last_node_id: str | None = None
        self.sent: list[tuple[str, Any, str | None]] = []  # (event, data, sid) of JSON messages
        self.previews = 0
        self.drop_after_progress: int | None = None  # cut every socket after N progress messages
        self._progress = 0
        self._lock = threading.Lock()

    # --- GET /ws ------------------------------------------------------------------------------

    def serve(self, peer: WebSocketPeer, rec: Recorded) -> None:
        sid = rec.query.get("clientId", [""])[0] or uuid.uuid4().hex
        with self._lock:
            old = self.peers.pop(sid, None)  # reusing a session: the old socket is forgotten
            self.peers[sid] = peer
            self.flags[sid] = {}
        del old  # ComfyUI leaves it open; it just gets no more messages
        try:
            status = {"exec_info": {"queue_remaining": self.queue_remaining()}}
            self.send("status", {"status": status, "sid": sid}, sid)
            if self.client_id == sid and self.last_node_id is not None:
                self.send("executing", {"node": self.last_node_id}, sid)
            first = True
            for text in peer.messages():
                try:
                    data = json.loads(text)
                except ValueError:
                    continue  # logged and ignored by ComfyUI
                if first and isinstance(data, dict) and data.get("type") == "feature_flags":
                    with self._lock:
                        self.flags[sid] = dict(data.get("data") or {})
                    self.send("feature_flags", SERVER_FLAGS, sid)
                first = False
        finally:
            with self._lock:
                if self.peers.get(sid) is peer:
                    del self.peers[sid]
                    self.flags.pop(sid, None)

    # --- sending ------------------------------------------------------------------------------

    def send(self, event: str, data: Any, sid: str | None = None) -> None:
        """To ``sid`` if it is connected, or to every socket when ``sid`` is None."""
        text = json.dumps({"type": event, "data": data})
        with self._lock:
            self.sent.append((event, data, sid))
            peers = list(self.peers.values()) if sid is None else [self.peers.get(sid)]
        for peer in peers:
            if peer is not None:
                peer.send_text(text)

    def queue_updated(self) -> None:
        self.send("status", {"status": {"exec_info": {"queue_remaining": self.queue_remaining()}}})

    def begin(self, client_id: str | None) -> None:
        self.client_id = client_id

    def executing(self, node: str, prompt_id: str) -> None:
        if self.client_id is None:
            return
        self.last_node_id = node
        data = {"node": node, "display_node": node, "prompt_id": prompt_id}
        self.send("executing", data, self.client_id)

    def executed(self, node: str, output: dict[str, Any], prompt_id: str) -> None:
        if self.client_id is not None:
            data = {"node": node, "display_node": node, "output": output, "prompt_id": prompt_id}
            self.send("executed", data, self.client_id)

    def progress(self, value: int, maximum: int, node: str, prompt_id: str) -> None:
        """One sampler step: the progress message, then a preview frame (main.py's hook)."""
        if self.client_id is None:
            return
        data = {"value": value, "max": maximum, "prompt_id": prompt_id, "node": node}
        self.send("progress", data, self.client_id)
        self._preview(node, prompt_id)
        self._progress += 1
        if self.drop_after_progress is not None and self._progress >= self.drop_after_progress:
            self.drop_all()

    def _preview(self, node: str, prompt_id: str) -> None:
        sid = self.client_id
        with self._lock:
            peer = self.peers.get(sid) if sid is not None else None
            flags = self.flags.get(sid, {}) if sid is not None else {}
            self.previews += peer is not None
        if peer is None:
            return
        image = png((40, 40, 40), (8, 8))
        if flags.get("supports_preview_metadata"):
            meta = json.dumps(
                {
                    "node_id": node,
                    "prompt_id": prompt_id,
                    "display_node_id": node,
                    "parent_node_id": None,
                    "real_node_id": node,
                    "image_type": "image/png",
                }
            ).encode()
            head = struct.pack(">II", PREVIEW_IMAGE_WITH_METADATA, len(meta))
            peer.send_bytes(head + meta + image)
        else:
            peer.send_bytes(struct.pack(">II", PREVIEW_IMAGE, 2) + image)

    def finished(self, prompt_id: str) -> None:
        """After the history entry is written: status to all, then ``executing`` null."""
        self.last_node_id = None
        self.queue_updated()
        if self.client_id is not None:
            self.send("executing", {"node": None, "prompt_id": prompt_id}, self.client_id)

    def drop_all(self) -> None:
        """Cut every socket without a close frame (a network failure, a restart)."""
        with self._lock:
            peers = list(self.peers.values())
        for peer in peers:
            peer.drop()

    def connected(self) -> list[str]:
        with self._lock:
            return list(self.peers)


def timestamp() -> int:
    return int(time.time() * 1000)
