"""Batch mode for the steps that call providers (``llm``, ``image`` with ``batch: true``): a
call's answer asked of the run's batches (engine/run/batchdesk.py) rather than of the provider
directly. The request is the direct one, under the same key: the ledger row it ends in is the
one a direct call would have made."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import StepFailure
from ..providers.base import ImageRequest, ImageResult, Provider
from .base import StepContext

if TYPE_CHECKING:  # (imported where a call goes by batch: a run without one never loads it)
    from ..providers.batchapi import BatchAPI, LineResult


def batching(ctx: StepContext, provider: Provider, asked: Any, key: str | None = None) -> bool:
    """Whether this execution's calls go by batch: asked (``batch: true``), and the provider
    has a batch API in a run that keeps batches. A provider without one (fake, Ollama, ...)
    is called directly, and the step's log says so: the answer is the same either way.

    A call ``key`` that a batch holds (sent, or answered and not yet taken) goes by it even
    when not asked (``batch: true`` taken off while it runs): sent directly, it would be paid
    twice."""
    if not asked:
        batches = ctx.env.batches
        if key is None or batches is None or not batches.holds(key):
            return False  # (most calls: the batch API's module is never loaded for them)
    from ..providers.batchapi import batch_api_of

    if not asked:  # a batch holds it
        return batch_api_of(provider) is not None
    if batch_api_of(provider) is None or ctx.env.batches is None:
        ctx.log(f"{provider.name} has no batch API: its calls go directly")
        return False
    return True


async def asked_in_batch(
    ctx: StepContext,
    provider: Provider,
    key: str,
    body_of: Callable[[BatchAPI], tuple[str, dict[str, Any]]],
) -> tuple[BatchAPI, LineResult]:
    """The provider's batch API and the answer its batch gave call ``key`` (``body_of(api)``:
    its endpoint and request body). Raises BatchPending while the call waits in a batch (or is
    queued for one), StepFailure when the provider has no batch API (``batching`` said so)."""
    from ..providers.batchapi import batch_api_of

    api = batch_api_of(provider)
    if api is None or ctx.env.batches is None:
        raise StepFailure(f"{provider.name}: this provider has no batch API (batch: true)")
    endpoint, body = body_of(api)
    answer: LineResult = await ctx.env.batches.answer(
        step_id=ctx.step_id, provider=provider, api=api, key=key, endpoint=endpoint, body=body
    )
    return api, answer


async def image_in_batch(
    ctx: StepContext, provider: Provider, request: ImageRequest
) -> tuple[BatchAPI, LineResult]:
    """The batch's answer to an image call (BatchPending meanwhile); see ``image_of``."""
    if request.references:  # /images/edits takes a form upload, which no batch line holds
        raise StepFailure(
            f"{provider.name}: a batch sends no reference images; drop `batch: true` for a "
            "step with references"
        )
    return await asked_in_batch(
        ctx, provider, request.idempotency_key, lambda api: api.image_body(request)
    )


def image_of(
    provider: Provider, answered: tuple[BatchAPI, LineResult], request: ImageRequest
) -> ImageResult:
    """The image of a batch's answer, or its failure as the ProviderError a direct call of the
    same request would have raised (transient: its retry goes in the next batch)."""
    api, line = answered
    if line.body is None:
        raise provider.error(f"(batch) {line.message}", transient=line.transient)
    return api.image_result(line.body, request)
