"""Helpers for steps that make provider calls: redacted per-call logs and policy-driven retries.

Each call keyed by its idempotency key gets ``<key>.out`` (request and response summaries) and,
when an attempt failed, ``<key>.err`` (every failed attempt) in the run's log directory. Lines
are appended, so a call resumed later in the same run adds to the story instead of erasing it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ProviderError
from .base import Provider
from .redact import Redactor
from .retry import call_with_retries

T = TypeVar("T")


@dataclass(frozen=True)
class Event:
    """One thing that happened to a keyed call, stamped when it happened."""

    name: str
    data: Mapping[str, Any]
    t: float = field(default_factory=time.time)


class CallLog:
    """Appends JSON-line summaries of one keyed call to ``<dir>/<key>.out`` and ``.err``.

    Events are stamped when they happen and formatted (redacted) when written, so a call that
    went well can write its request and response with one open, from a worker thread.
    """

    def __init__(self, directory: Path, key: str, redactor: Redactor) -> None:
        self.directory = directory
        self.out_path = directory / f"{key}.out"
        self.err_path = directory / f"{key}.err"
        self.redactor = redactor

    def line(self, event: Event) -> str:
        """The event as one redacted JSON line."""
        record = {
            "t": round(event.t, 3),
            "event": event.name,
            **self.redactor.redact_json(dict(event.data)),
        }
        return self.redactor.redact(json.dumps(record, sort_keys=True, default=str))

    def _append(self, path: Path, events: tuple[Event, ...]) -> None:
        text = "".join(f"{self.line(event)}\n" for event in events)
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
        except FileNotFoundError:  # the run's first call: the directory is made once, here
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)

    def write_out(self, *events: Event) -> None:
        """Append events to ``<key>.out``."""
        self._append(self.out_path, events)

    def out(self, event: str, data: Mapping[str, Any]) -> None:
        self.write_out(Event(event, data))

    def err(self, event: str, data: Mapping[str, Any]) -> None:
        self._append(self.err_path, (Event(event, data),))


def error_summary(exc: ProviderError) -> dict[str, Any]:
    return {
        "kind": exc.kind,
        "status": exc.status,
        "retry_after": exc.retry_after,
        "message": exc.message,
    }


async def with_provider_retries(
    provider: Provider,
    fn: Callable[[], Awaitable[T]],
    *,
    on_retry: Callable[[int, ProviderError, float], object] | None = None,
) -> T:
    """``fn()`` retried on transient errors as the provider's retry policy says."""
    policy = provider.retry_policy()
    return await call_with_retries(
        fn,
        attempts=policy.attempts,
        base_delay=policy.base_delay,
        cap=policy.cap,
        on_retry=on_retry,
    )


def jsonable(value: Any) -> Any:
    """A plain-JSON copy of backend metadata (anything exotic becomes its text)."""
    return json.loads(json.dumps(value, default=str))
