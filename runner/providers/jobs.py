"""Remote jobs: where a job-queue backend's job for one call is journaled.

A job-queue backend (ComfyUI) keeps running a job after the client stops waiting. The provider
records the job (backend URL, job id, submission number, state) through ``RemoteJob.record``
*before* it waits, and the step journals it under the call's idempotency key. A later attempt,
a resumed run or the next apply hands the recorded job back in ``known``, so the provider
re-attaches to it instead of queuing (and paying for) the same work again. The backend's base
URL is part of the record, so a re-attach goes to the backend that has the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Recorder = Callable[[Mapping[str, Any] | None], None]


class RemoteJob:
    """The job of one keyed call: what is known of it and how to journal a change."""

    def __init__(
        self,
        key: str,
        known: Mapping[str, Any] | None = None,
        recorder: Recorder | None = None,
        progress: Callable[[str], object] | None = None,
        waiting: Callable[[str], object] | None = None,
    ) -> None:
        self.key = key
        self.known: dict[str, Any] | None = dict(known) if known else None
        self._recorder = recorder
        self._progress = progress
        self._waiting = waiting
        self._said = ""
        self._queued = ""

    def say(self, line: str) -> None:
        """Tell the user where the job stands (queued, running, fetched), once per change."""
        if line != self._said and self._progress is not None:
            self._said = line
            self._progress(line)

    def queued(self, where: str) -> None:
        """Tell the user the job waits behind other work (``where``: "queued, 1 ahead on HOST"),
        once per change: said on the console and the page, not only in the log."""
        if where != self._queued and self._waiting is not None:
            self._queued = where
            self._waiting(where)

    def record(self, job: Mapping[str, Any] | None) -> None:
        """Remember ``job`` (None: no job to re-attach to) and journal it before returning."""
        self.known = dict(job) if job else None
        if self._recorder is not None:
            self._recorder(self.known)

    def update(self, **changes: Any) -> None:
        """Record the known job with ``changes`` applied."""
        self.record({**(self.known or {}), **changes})
