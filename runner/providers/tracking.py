"""What one keyed provider call did on the wire, told as it happens.

The HTTP layer calls ``sent()`` as a request starts going out, before its first byte: the step
journals it at once, so a crash from then on (even one between the backend receiving the body
and the reply) leaves the call marked sent, and the next apply does not pay for it again. A
request that fails before its body went out in full is still classified TRANSIENT (the backend
cannot act on half a request); once the body is out, a lost reply is MAYBE_EXECUTED (see
``runner.errors.Failure``). A job-queue provider calls ``remote(job_id)`` as soon as the
backend names its job, so a crash, a timeout or the next apply knows which job to ask about.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable


class CallTracker:
    """Counts the requests of one call that reached the backend and keeps its remote job id."""

    def __init__(
        self,
        *,
        on_sent: Callable[[], object] | None = None,
        on_remote: Callable[[str, bool], object] | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._on_sent = on_sent
        self._on_remote = on_remote
        self._settle = settle
        self.attempts = 0  # requests that started going out to the backend
        self.submitted_at: float | None = None
        self.remote_id: str | None = None

    def sent(self) -> None:
        """A request of this call is going out to the backend (journaled before its first byte)."""
        self.attempts += 1
        if self.submitted_at is None:
            self.submitted_at = time.time()
        if self._on_sent is not None:
            self._on_sent()

    async def settled(self) -> None:
        """Return once what ``sent()`` journaled is committed (with the records of the other
        requests starting at the same moment: one commit)."""
        if self._settle is not None:
            await self._settle()

    def remote(self, job_id: str, *, answered: bool = False) -> None:
        """The backend named this call's job (a ComfyUI prompt_id, an OpenAI response id).

        Journaled at once (committed) when the call will wait on the job; ``answered``: the id
        came with the call's reply, whose result the step records next, so it is committed
        with that result (``on_remote(job_id, durable)`` is told which)."""
        if job_id == self.remote_id:
            return
        self.remote_id = job_id
        if self._on_remote is not None:
            self._on_remote(job_id, not answered)
