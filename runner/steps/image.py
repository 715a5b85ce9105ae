"""The ``image`` step: n image iterations from one prompt, each a keyed, journaled provider call.

Iteration k uses seed + k - 1 (or, for a seedless provider, folds k into its key). Each
iteration's idempotency key is recorded in the ledger before the call and its result after, so a
retry or a resume never pays twice for an image it already has. Only the provider call is bounded
by the concurrency cap; storing overlaps with the next generations. A failed iteration is
collected while the others complete; the step fails only when every iteration failed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location, ProviderError, StepFailure
from ..providers.base import ImageRequest, ImageResult, Provider
from ..providers.calls import (
    CallLog,
    Event,
    cancelled_in_flight,
    error_summary,
    failed_status,
    failure_reason,
    jsonable,
    tracker,
    uncertain_reason,
    with_provider_retries,
)
from ..providers.jobs import RemoteJob
from ..providers.requestkey import request_key
from .base import (
    ResultStatus,
    StepContext,
    StepEnv,
    StepResult,
    StepType,
    invalid,
    reference_files,
)
from .batched import batching, image_in_batch, image_of
from .outputshape import (
    INTEGER,
    MAPPING,
    STRING,
    Shape,
    closed,
    from_doc,
    list_of,
)
from .provider_use import check_provider, load_reference, resolve_provider

DEFAULT_SIZE = "1536x1024"
_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_size(value: Any) -> tuple[int, int]:
    """ "1280x720" or [1280, 720] -> (1280, 720). Raises ValueError for anything else."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            w, h = int(m[1]), int(m[2])
            if w > 0 and h > 0:
                return w, h
    elif (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return int(value[0]), int(value[1])
    raise ValueError(f"size must be 'WIDTHxHEIGHT' or [width, height], got {value!r}")


def call_key(
    request: ImageRequest,
    provider_profile: str,
    *,
    template_hash: str = "",
    item: str = "",
    part: str = "",
    ordinal: int | None = None,
    run_id: str | None = None,
    unsent: frozenset[str] = frozenset(),
) -> str:
    """The key of one paid image call (32 hex chars): the digest of the canonical request it
    sends (every keyed field the provider puts on the wire, references by content; ``unsent``:
    the fields it does not) and the provider profile, scoped to the thumbnail's template, item
    and part (design/thumbnail.md).

    ``ordinal`` joins only for seedless providers (so n iterations get n keys); ``run_id`` only
    when calls must not be shared across runs.
    """
    scope: dict[str, Any] = {"template_hash": template_hash, "item": item, "part": part}
    if ordinal is not None:
        scope["ordinal"] = ordinal
    if run_id is not None:
        scope["run"] = run_id
    return request_key(request, provider_profile, scope, unsent=unsent)


class ImageStep(StepType):
    name: ClassVar[str] = "image"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "generate n images from a prompt with an image provider"
    key_neutral: ClassVar[Mapping[str, str]] = {
        "concurrency": "how many calls are in flight at once, never what they make",
        "batch": "how the calls are sent, not what they ask: a batch line is the direct request, "
        "under the same call key",
    }
    output_doc: ClassVar[dict[str, str]] = {
        "iterations": (
            "list: one per image, with `ordinal`, `seed`, `idempotency_key`, `raw` (object "
            "digest of the image, null if it failed), `status`, `error` and `metadata`"
        ),
        "provider": "string: the provider's name",
        "provider_profile": "string: the provider profile used",
        "completed": "integer: images made",
        "failed": "integer: images that failed",
    }
    iteration_shape: ClassVar[Shape] = closed(
        ordinal=INTEGER,
        seed=INTEGER,
        idempotency_key=STRING,
        raw=STRING,
        status=STRING,
        error=STRING,
        metadata=MAPPING,
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "description": "the rendered prompt"},
            "negative_prompt": {"type": "string", "description": "what to avoid (if supported)"},
            "n": {
                "type": "integer",
                "minimum": 1,
                "maximum": 64,
                "default": 1,
                "description": "number of iterations",
            },
            "size": {
                "description": "'WIDTHxHEIGHT' or [width, height]",
                "default": DEFAULT_SIZE,
                "oneOf": [
                    {"type": "string", "pattern": r"^\s*\d+\s*[xX]\s*\d+\s*$"},
                    {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1},
                        "minItems": 2,
                        "maxItems": 2,
                    },
                ],
            },
            "seed": {
                "type": "integer",
                "default": 0,
                "description": "seed of iteration 1; iteration k uses seed + k - 1",
            },
            "provider": {
                "type": ["string", "null"],
                "description": "provider name (null: the default provider)",
            },
            "concurrency": {
                "type": "integer",
                "minimum": 1,
                "default": 4,
                "description": "max calls in flight (also capped by the provider)",
            },
            "references": {
                "type": "array",
                "items": {"type": "string"},
                "description": "reference images: object digests or workspace paths",
            },
            "params": {"type": "object", "description": "provider-specific parameters"},
            "batch": {
                "type": "boolean",
                "description": "send the calls through the provider's batch API (half price; "
                "the run suspends, awaiting_batch, until a later apply collects them)",
            },
            "template_hash": {
                "type": "string",
                "description": "hash of the prompt template spec (key part)",
            },
            "video_id": {"type": "string", "description": "item id (key part); alias of item"},
            "item": {"type": "string", "description": "item id (key part)"},
            "part": {"type": "string", "description": "part id (key part; '' for hero runs)"},
            "dedupe_run": {
                "type": "boolean",
                "default": False,
                "description": "scope call reuse to this run: the run id joins "
                "every idempotency key",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        size = args.get("size", DEFAULT_SIZE)
        if not (isinstance(size, str) and "${{" in size):
            try:
                parse_size(size)
            except ValueError as exc:
                raise invalid(str(exc), where) from None
        check_provider(args, root, where)

    def settings_asked(self, args: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
        """The request settings this step asks its provider to honour (providers/honours.py),
        each with where ``with:`` gives it. ``seed`` is not among them: it is iteration 1's
        seed where the provider takes one (engine/run/honoured.py checks that n images differ)."""
        asked: dict[str, tuple[Any, ...]] = {}
        if args.get("negative_prompt"):
            asked["negative_prompt"] = ("negative_prompt",)
        if "size" in args:
            asked["size"] = ("size",)
        if args.get("references"):
            asked["references"] = ("references",)
        params = args.get("params")
        for key in params if isinstance(params, dict) else ():
            asked[f"params.{key}"] = ("params", key)
        return asked

    def output_shape(self, args: Mapping[str, Any]) -> Shape:
        shape = from_doc(self.output_doc)
        fields = {**shape.fields, "iterations": list_of(self.iteration_shape)}
        return Shape("object", fields=fields, closed=True)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return reference_files(args.get("references"), root)

    def key_extra(self, args: Mapping[str, Any], env: StepEnv) -> dict[str, Any]:
        provider = resolve_provider(env, args.get("provider"), "image", None)
        return {"provider": provider.profile()}

    def settle_run(
        self,
        *,
        journal: Any,
        run_id: str,
        plan: Any,
        outputs: dict[str, Any],
        status: str,
        exit_code: int,
    ) -> tuple[str, int] | None:
        """The run ends by its iterations (design/thumbnail.md), recorded here first."""
        from ..state.iterations import settle_run

        return settle_run(journal, run_id, plan, outputs, status, exit_code)

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        provider = resolve_provider(ctx.env, args.get("provider"), "image", ctx.step_id)
        profile = provider.profile()
        caps = provider.capabilities
        unsent = provider.not_sent.get("image", frozenset())
        # A seed the provider never sends cannot tell iterations apart: their ordinal does.
        seeded = caps.supports_seed and "seed" not in unsent
        n = int(args.get("n", 1))
        base_seed = int(args.get("seed", 0))
        size = parse_size(args.get("size", DEFAULT_SIZE))
        prompt = str(args["prompt"])
        refs = [load_reference(ctx, str(r)) for r in args.get("references") or []]
        ref_sha = ",".join(hashlib.sha256(r).hexdigest() for r in refs)
        if refs and not caps.supports_reference_image:
            ctx.log(
                f"warning: provider '{provider.name}' takes no reference image; "
                "generating from the prompt alone"
            )
        cap = min(int(args.get("concurrency", 4)), caps.max_concurrency)
        calls = _Calls(ctx, provider, profile, asyncio.Semaphore(max(cap, 1)), ref_sha)
        calls.batch = batching(ctx, provider, args.get("batch"))
        item = str(args.get("video_id") or args.get("item") or "")

        async def iteration(k: int) -> dict[str, Any]:
            request = ImageRequest(
                prompt=prompt,
                negative_prompt=str(args.get("negative_prompt", "")),
                size=size,
                seed=base_seed + k - 1 if seeded else None,
                references=refs if caps.supports_reference_image else [],
                params=dict(args.get("params") or {}),
            )
            request.idempotency_key = call_key(
                request,
                profile,
                template_hash=str(args.get("template_hash", "")),
                item=item,
                part=str(args.get("part", "")),
                ordinal=None if seeded else k,
                run_id=ctx.run_id if args.get("dedupe_run") else None,
                unsent=unsent,
            )
            return await self._one(calls, k, request)

        try:
            # Every iteration asks (a batch's are queued together), then a wait is raised.
            done = await asyncio.gather(*map(iteration, range(1, n + 1)), return_exceptions=True)
        finally:
            await calls.logs_written()
        iterations = [it for it in done if not isinstance(it, BaseException)]
        if len(iterations) < n:
            raise next(it for it in done if isinstance(it, BaseException))
        return self._result(iterations, provider, profile)

    async def _one(self, calls: _Calls, k: int, request: ImageRequest) -> dict[str, Any]:
        ctx, provider = calls.ctx, calls.provider
        key = request.idempotency_key
        entry: dict[str, Any] = {
            "ordinal": k,
            "seed": request.seed,
            "idempotency_key": key,
            "raw": None,
            "status": "failed",
            "error": None,
            "metadata": {},
            "usage": {},
            "reused": False,
        }
        done = ctx.ledger.completed(key) if ctx.ledger is not None else None
        if done is not None:
            previous = done.get("digest")
            if isinstance(previous, str) and ctx.objects.has(previous):
                ctx.log(f"image #{k}: reusing the completed call {key[:12]}")
                wrong = calls.wrong_size(previous, request.size)
                return {
                    **entry,
                    "raw": previous,
                    "status": "failed" if wrong else "completed",
                    "error": wrong,
                    "metadata": done.get("metadata") or {},
                    "reused": True,
                }
            entry["error"] = (
                f"call {key} is recorded as completed but its image is missing or damaged "
                "in the store; not paying for it again without asking (runner verify --repair "
                "lists the calls to make again, and marks them once you agree)"
            )
            return entry
        if ctx.ledger is not None:
            refused = uncertain_reason(
                provider, key, ctx.ledger.record(key), retry_uncertain=ctx.env.retry_uncertain
            )
            if refused is not None:
                ctx.log(f"image #{k}: {refused}")
                return {**entry, "error": f"{provider.name}: {refused}"}
        # batch mode: the batch's answer (BatchPending raised while it has none)
        by_batch = calls.batch or batching(ctx, provider, False, key)  # (or a batch holds it)
        from_batch = await image_in_batch(ctx, provider, request) if by_batch else None
        summary = {
            "provider": provider.name,
            "profile": calls.profile,
            "prompt": request.prompt,
            "negative_prompt": request.negative_prompt,
            "size": list(request.size),
            "seed": request.seed,
            "references": calls.ref_sha,
            "params": request.params,
            "ordinal": k,
            "run_id": ctx.run_id,
            "step": ctx.step_id,
            **({"batch": True} if calls.batch else {}),  # priced at the batch rate (spend.py)
        }
        if ctx.ledger is not None:
            try:
                ctx.ledger.begin(key, jsonable(summary))
            except StepFailure as exc:  # a budget on real spend refused it: it is not sent
                ctx.log(f"image #{k}: {exc.reason}")
                return {**entry, "error": exc.reason}
            await ctx.ledger.durable()  # in flight, committed, before the provider is called
            if provider.remote_jobs:  # a job journaled by an earlier attempt is re-attached
                note = functools.partial(ctx.ledger.note_remote_job, key)
                request.job = RemoteJob(
                    key,
                    ctx.ledger.remote_job(key),
                    note,
                    lambda line: ctx.log(f"image #{k}: {line}"),
                    lambda where: ctx.waiting(f"image #{k}: {where}"),
                )
        request.tracker = tracker(ctx.ledger, key)
        log = CallLog(ctx.log_dir, key, provider.redactor)
        asked = Event("request", summary)  # written with the outcome: one open per call

        def retrying(attempt: int, exc: ProviderError, delay: float) -> None:
            log.err("retry", {"attempt": attempt, "delay_s": round(delay, 3), **error_summary(exc)})
            ctx.log(f"image #{k}: {exc.message} (retrying in {delay:.1f}s)")

        def call() -> Awaitable[ImageResult]:
            return provider.generate_image(request)

        try:
            if from_batch is not None:
                if ctx.ledger is not None:
                    ctx.ledger.sent(key)
                result = image_of(provider, from_batch, request)
            else:
                # The step's own cap outside the provider's: a call waiting for this step's
                # turn must not hold a permit that other steps' calls could use.
                async with calls.gate:
                    result = await with_provider_retries(
                        provider, call, on_retry=retrying, retry_uncertain=ctx.env.retry_uncertain
                    )
            stored = await calls.keep(result.image)
        except asyncio.CancelledError as exc:  # the step's timeout, or a cancelled run
            cancelled_in_flight(ctx.ledger, key, request.tracker, exc)
            raise
        except ProviderError as exc:
            if ctx.ledger is not None:  # the ledger first: what was paid matters more than a log
                ctx.ledger.fail(key, exc.message, failed_status(exc))
            log.write_out(asked)
            log.err("failed", error_summary(exc))
            reason = failure_reason(provider, exc)
            ctx.log(f"image #{k} failed: {reason}")
            return {**entry, "error": reason, "transient": exc.transient}
        meta = provider.redactor.redact_json(jsonable(result.metadata))  # e.g. an echoed key
        if ctx.ledger is not None:  # the ledger stays on the loop's thread (SQLite)
            ctx.ledger.complete(
                key, {"digest": stored, "metadata": meta, "usage": dict(result.usage)}
            )
            await ctx.ledger.durable()
        # After the ledger: a logged response always means a recorded, never-repaid call.
        answered = {"digest": stored, "bytes": len(result.image), "metadata": meta}
        calls.write_later(log, asked, Event("response", {**answered, "usage": result.usage}))
        # Paid and recorded: a later apply reuses it, and finds it the wrong size again.
        wrong = calls.wrong_size(stored, request.size)
        ctx.log(f"image #{k} failed: {wrong}" if wrong else f"image #{k} completed ({stored[:12]})")
        return {
            **entry,
            "raw": stored,
            "status": "failed" if wrong else "completed",
            "error": wrong,
            "metadata": meta,
            "usage": dict(result.usage),
        }

    @staticmethod
    def _result(iterations: list[dict[str, Any]], provider: Provider, profile: str) -> StepResult:
        # Which calls the ledger answered is history, not the result (a fresh run makes the
        # same images): said in the execution's report, never in the output a key reads.
        reused = [it["idempotency_key"] for it in iterations if it.pop("reused", False)]
        report = {"reused_calls": reused} if reused else None
        failed = [it for it in iterations if it["status"] != "completed"]
        if failed and len(failed) == len(iterations):
            reasons = "; ".join(f"#{it['ordinal']}: {it['error']}" for it in failed)
            retryable = any(it.get("transient") for it in failed)
            for it in iterations:
                it.pop("usage", None)
                it.pop("transient", None)
            raise StepFailure(
                f"all {len(failed)} image iterations failed: {reasons}",
                retryable=retryable,
                output={
                    "iterations": iterations,
                    "provider": provider.name,
                    "provider_profile": profile,
                    "completed": 0,
                    "failed": len(failed),
                },
            )
        usage: dict[str, int] = {}
        for it in iterations:
            for name, count in (it.pop("usage", None) or {}).items():
                if isinstance(count, int):
                    usage[name] = usage.get(name, 0) + count
            it.pop("transient", None)
        output = {
            "iterations": iterations,
            "provider": provider.name,
            "provider_profile": profile,
            "completed": len(iterations) - len(failed),
            "failed": len(failed),
        }
        return StepResult(
            output=output,
            artifacts=[it["raw"] for it in iterations if it["raw"]],
            # Some iterations failed: partial, so the next apply runs the step again (completed
            # calls are answered by the ledger, failed ones are retried); finalize continues.
            status=ResultStatus.PARTIAL if failed else ResultStatus.OK,
            usage=usage,
            report=report,
        )


class _Calls:
    """What the iterations of one image step share, and the work they hand to worker threads."""

    def __init__(
        self,
        ctx: StepContext,
        provider: Provider,
        profile: str,
        gate: asyncio.Semaphore,
        ref_sha: str,
    ) -> None:
        self.ctx, self.provider, self.profile, self.gate = ctx, provider, profile, gate
        self.ref_sha = ref_sha
        self.batch = False  # batch mode: the calls go to the provider's batch API
        self._writes: list[asyncio.Future[None]] = []
        # What an image came back as, to hold it to the size asked where the provider carries it.
        self.sizes: dict[str, tuple[int, int]] = {}
        self.carries_size = "size" in provider.honours("image").fields

    def wrong_size(self, digest: str, asked: tuple[int, int]) -> str | None:
        """Why the image ``digest`` is not what was asked (None: it is, or no size was
        carried): a provider that drops the size is never taken at its word silently."""
        if not self.carries_size:
            return None
        size = self.sizes.get(digest)
        if size is None:  # an image kept by an earlier run
            from .imaging.intact import check_intact

            size = self.sizes[digest] = check_intact(self.ctx.objects.read_bytes(digest))
        if size == tuple(asked):
            return None
        return (
            f"{self.provider.name} made a {size[0]}x{size[1]} image where "
            f"{asked[0]}x{asked[1]} was asked: the size did not take effect (its workflow or "
            "model decides it); ask for the size it makes"
        )

    async def keep(self, image: bytes) -> str:
        """Check the reply is a whole image and store it: one worker hand-off for both.

        Raises a permanent ProviderError for a cut-off or garbled image: that is a bad reply,
        not a completed call to reuse forever.
        """
        from .imaging.finalize import FinalizeError
        from .imaging.intact import check_intact  # Pillow: only when used

        def keep() -> str:
            size = check_intact(image)
            # Durable in the worker itself: the ledger records the image right after its call,
            # and an object left to the grouped fsync would be fsynced on the event loop then.
            digest = self.ctx.objects.put_bytes(image, durable=True)
            self.sizes[digest] = size
            return digest

        try:
            return await asyncio.to_thread(keep)
        except FinalizeError as exc:
            message = f"the image in the reply is unusable: {exc}"
            raise self.provider.error(message, transient=False) from None

    def write_later(self, log: CallLog, *events: Event) -> None:
        """Append to a call's log in a worker thread; ``logs_written`` waits for all of them."""
        loop = asyncio.get_running_loop()
        self._writes.append(loop.run_in_executor(None, log.write_out, *events))

    async def logs_written(self) -> None:
        """Wait for every log write; raises the first that failed."""
        await asyncio.gather(*self._writes)
