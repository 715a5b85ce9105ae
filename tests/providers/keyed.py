"""An OpenAI-style server that counts completed image generations per Idempotency-Key.

Used by the end-to-end tests that kill a runner mid-run: each generation takes ``delay`` seconds,
a generation counts as completed only when the server has produced its reply, and once
``hold_after`` generations have completed every further request is held until ``release()``
(so the test can kill the client while exactly one call is on the wire, deterministically).
"""

from __future__ import annotations

import collections
import threading
import time

from .openai_server import OpenAIServer
from .servers import Recorded, Reply


class CountingOpenAIServer(OpenAIServer):
    """OpenAIServer whose /v1/images/generations is slow, counted per key, and can be held.

    OpenAIServer routes that path to ``self._generate``, which this class overrides.
    """

    def __init__(self, *, delay: float = 0.3, hold_after: int | None = None) -> None:
        super().__init__()
        self.delay = delay
        self.hold_after = hold_after
        self.received: list[str] = []  # the Idempotency-Key of every generation request, in order
        self.completed: collections.Counter[str] = collections.Counter()
        self._count_lock = threading.Lock()
        self._released = threading.Event()
        self._abort_held = False

    def total_completed(self) -> int:
        with self._count_lock:
            return sum(self.completed.values())

    def received_count(self) -> int:
        with self._count_lock:
            return len(self.received)

    def release(self, *, abort: bool) -> None:
        """Stop holding; held requests are dropped unanswered when ``abort`` (never completed)."""
        self._abort_held = abort
        self.hold_after = None
        self._released.set()

    def _generate(self, rec: Recorded) -> Reply:
        key = rec.headers.get("idempotency-key", "")
        with self._count_lock:
            self.received.append(key)
            held = self.hold_after is not None and sum(self.completed.values()) >= self.hold_after
        if held:
            self._released.wait(timeout=30)
            if self._abort_held:
                return Reply(drop=True)
        time.sleep(self.delay)
        reply = super()._generate(rec)
        if reply.status == 200:
            with self._count_lock:
                self.completed[key] += 1
        return reply
