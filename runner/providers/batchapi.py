"""What a provider with a batch API offers (OpenAI's /v1/batches; Anthropic's Message Batches
may implement the same protocol), and the signal a step body gives while its call waits in one.

A batch request line is exactly the request a direct call would send, under its call key as
``custom_id``: a batch answer and a direct one are the same ledger row (engine/run/batchdesk.py
journals the batches; docs/providers.md, "Batch mode").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import StepFailure

if TYPE_CHECKING:  # every apply makes a batch desk: the requests' module is not loaded for it
    from .base import ImageRequest, ImageResult, TextRequest, TextResult

# A remote batch in one of these is over: nothing more will be answered in it.
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


class BatchPending(StepFailure):
    """Raised by a step body whose call waits in a batch (queued, or sent and not yet done):
    the execution is not a failure, it is suspended (awaiting_batch) until a later apply.
    ``key``: the call that waits (its execution's row names it, so a plan finds its batch)."""

    def __init__(self, reason: str, key: str | None = None) -> None:
        super().__init__(reason, retryable=False)
        self.key = key


@dataclass(frozen=True)
class RemoteBatch:
    """A batch as the service reports it."""

    id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    expires_at: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    problem: str | None = None  # why a failed batch failed (its validation errors)

    @property
    def over(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True)
class LineResult:
    """One answered line of a batch: ``body`` when the request got a 2xx reply, else the
    status code and message of its failure (``transient``: the same request may pass later)."""

    custom_id: str
    body: dict[str, Any] | None
    status_code: int | None = None
    message: str = ""
    transient: bool = False


class BatchAPI(Protocol):
    """A provider's batch endpoints. ``max_requests`` / ``max_bytes``: one batch's limits.

    ``upload`` puts the JSONL of the batch's lines where the service takes it (a service that
    takes the requests in the creation itself returns a placeholder, and ``create`` reads
    ``lines()``); ``find_upload`` / ``find_batch`` find what a request whose reply was lost made
    (``tag``: runner's batch id; ``since``: when runner journaled it; ``total``: its lines;
    ``known``: the service's batch ids runner already holds, none of which it can be)."""

    max_requests: int
    max_bytes: int

    def text_body(self, request: TextRequest) -> tuple[str, dict[str, Any]]: ...

    def text_result(self, body: dict[str, Any], request: TextRequest) -> TextResult: ...

    def image_body(self, request: ImageRequest) -> tuple[str, dict[str, Any]]: ...

    def image_result(self, body: dict[str, Any], request: ImageRequest) -> ImageResult: ...

    def line(self, custom_id: str, endpoint: str, body: dict[str, Any]) -> bytes: ...

    async def upload(self, name: str, data: bytes) -> str: ...

    async def find_upload(self, name: str) -> str | None: ...

    async def create(
        self, file_id: str, endpoint: str, tag: str, lines: Callable[[], bytes]
    ) -> RemoteBatch: ...

    async def find_batch(
        self, tag: str, *, since: float, total: int, known: frozenset[str]
    ) -> RemoteBatch | None: ...

    async def get(self, remote_id: str) -> RemoteBatch: ...

    async def results(self, batch: RemoteBatch) -> list[LineResult]: ...

    async def cancel(self, remote_id: str) -> RemoteBatch: ...


def batch_api_of(provider: Any) -> BatchAPI | None:
    """The provider's batch API, or None when it has none."""
    make = getattr(provider, "batch_api", None)
    api: BatchAPI | None = make() if callable(make) else None
    return api
