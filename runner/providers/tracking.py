"""What one keyed provider call did on the wire, told as it happens.

The HTTP layer calls ``sent()`` once a request's body has gone out: from then on a lost reply
means the backend may have done (and billed) the work, so the failure is MAYBE_EXECUTED rather
than TRANSIENT (see ``runner.errors.Failure``). A job-queue provider calls ``remote(job_id)``
as soon as the backend names its job. The step that owns the call passes callbacks that journal
both at once, so a crash, a timeout or the next apply knows the request reached the backend and
which job to ask about.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class CallTracker:
    """Counts the requests of one call that reached the backend and keeps its remote job id."""

    def __init__(
        self,
        *,
        on_sent: Callable[[], object] | None = None,
        on_remote: Callable[[str], object] | None = None,
    ) -> None:
        self._on_sent = on_sent
        self._on_remote = on_remote
        self.attempts = 0  # requests whose body went out to the backend
        self.submitted_at: float | None = None
        self.remote_id: str | None = None

    def sent(self) -> None:
        """A request of this call reached the backend (its body was sent in full)."""
        self.attempts += 1
        if self.submitted_at is None:
            self.submitted_at = time.time()
        if self._on_sent is not None:
            self._on_sent()

    def remote(self, job_id: str) -> None:
        """The backend named this call's job (a ComfyUI prompt_id, an OpenAI response id)."""
        if job_id == self.remote_id:
            return
        self.remote_id = job_id
        if self._on_remote is not None:
            self._on_remote(job_id)
