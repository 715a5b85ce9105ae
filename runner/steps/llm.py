"""The ``llm`` step: one chat call to a text provider, its reply checked and journaled.

The request is keyed like an image call: the ledger records the key before the call and the
reply after, so a resume reuses a reply it already paid for. When a previous attempt failed a
check, the reasons are appended to the user prompt ("Previous attempt failed because:") and the
check round joins the key, so the retry is a new call that carries the feedback. A transient
failure is retried with the same request and key (engine/run/attempts.py): error text never
reaches the model. A reviewer's `revise` words are the reviewer's, under their own heading.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ..errors import InvalidPipeline, Location, ProviderError, StepFailure
from ..providers.base import Provider, TextRequest, TextResult
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
from ..providers.limits import waiting
from ..providers.requestkey import canonical_request, key_of, request_key
from ..source.datafiles import load_json
from .base import StepContext, StepEnv, StepResult, StepType, invalid, reference_files
from .batched import asked_in_batch, batching
from .ordered import in_order
from .outputshape import Shape, from_doc, from_json_schema
from .provider_use import load_reference, resolve_provider

FEEDBACK_HEADING = "Previous attempt failed because:"
REVIEW_HEADING = "A reviewer asked for these changes:"
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)

_MESSAGE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "user", "assistant"]},
        "content": {"type": "string"},
        "images": {
            "type": "array",
            "items": {"type": "string"},
            "description": "object digests or workspace paths",
        },
    },
}


def with_feedback(
    messages: list[dict[str, Any]], feedback: Sequence[str], review: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message ends with the reviewer's words, then the
    failed checks' reasons, each under its own heading."""
    if not feedback and not review:
        return messages
    parts = [
        heading + "\n" + "\n".join(f"- {line}" for line in lines)
        for heading, lines in ((REVIEW_HEADING, review), (FEEDBACK_HEADING, feedback))
        if lines
    ]
    section = "\n\n".join(parts)
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m["role"] == "user":
            m["content"] = f"{m['content']}\n\n{section}" if m["content"] else section
            return out
    out.append({"role": "user", "content": section})
    return out


def parse_json_reply(text: str) -> Any:
    """The JSON value of a reply, tolerating a Markdown code fence around it.

    Raises StepFailure(check=True) when the reply is not JSON.
    """
    m = _FENCE.match(text)
    body = m[1] if m else text
    try:  # strict: a NaN or an overflowing number would not survive the journal as JSON
        return load_json(body, "reply")
    except InvalidPipeline as exc:
        raise StepFailure(
            f"the reply is not valid JSON ({exc}): {text[:200]!r}", check=True
        ) from None


def check_schema(value: Any, schema: Mapping[str, Any]) -> None:
    """Raise StepFailure(check=True) naming the first place where ``value`` breaks ``schema``."""
    import jsonschema  # ~35 ms: only for steps that ask for a schema

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(value)
    )
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise StepFailure(
            f"the reply does not match the schema at {where}: {error.message}", check=True
        )


def _unlike_earlier_rounds(ctx: StepContext, request: TextRequest, profile: str) -> None:
    """A retry whose check feedback did not change would send an earlier round's very request
    (its reply paid for again, to be refused again): it goes out with another seed instead, or,
    at temperature 0 where no seed changes the reply, it is not sent and the step says why."""
    if ctx.ledger is None:
        return
    round_ = ctx.check_round
    same = next(
        (
            n
            for n in range(1, round_)
            if ctx.ledger.record(request_key(request, profile, n)) is not None
        ),
        None,
    )
    if same is None:
        return
    if request.temperature == 0:
        raise StepFailure(
            f"the check's feedback did not change since check failure {same}, and at "
            f"temperature 0 the same request gets the same reply: attempt {ctx.attempt} is not "
            "sent"
        )
    request.seed = (request.seed or 0) + round_
    request.idempotency_key = request_key(request, profile, round_)


class LlmStep(StepType):
    name: ClassVar[str] = "llm"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "ask a text provider; the reply must pass the step's check"
    requires_check: ClassVar[bool] = True
    produces_prompt: ClassVar[bool] = True
    key_neutral: ClassVar[Mapping[str, str]] = {
        "batch": "how the calls are sent, not what they ask: a batch line is the direct request, "
        "under the same call key"
    }
    output_doc: ClassVar[dict[str, str]] = {
        "text": "string: the reply",
        "json": "the reply parsed, with `format: json` (else null)",
        "usage": "mapping: token counts the provider reported",
        "model": "string: the model that answered",
        "provider": "string: the provider's name",
        "provider_profile": "string: the provider profile used",
        "idempotency_key": "string: the call's key (the same request is never paid twice)",
        "sha256": "string: object digest of the stored reply",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "system": {"type": "string", "description": "system prompt"},
            "prompt": {"type": "string", "description": "user prompt (the last user message)"},
            "messages": {
                "type": "array",
                "items": _MESSAGE_SCHEMA,
                "description": "chat messages before the prompt",
            },
            "provider": {
                "type": ["string", "null"],
                "description": "provider name (null: the default provider)",
            },
            "model": {"type": ["string", "null"], "description": "model (provider default)"},
            "temperature": {"type": ["number", "null"], "minimum": 0},
            "seed": {"type": ["integer", "null"]},
            "format": {"enum": ["text", "json"], "default": "text"},
            "schema": {"type": "object", "description": "JSON Schema the JSON reply must meet"},
            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
            "params": {"type": "object", "description": "provider-specific parameters"},
            "batch": {
                "type": "boolean",
                "description": "send the calls through the provider's batch API (half price; "
                "the run suspends, awaiting_batch, until a later apply collects them)",
            },
        },
        "anyOf": [{"required": ["prompt"]}, {"required": ["messages"]}],
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        if "prompt" not in args and not args.get("messages"):
            raise invalid("llm needs `prompt` or `messages`", where)
        schema = args.get("schema")
        if isinstance(schema, dict):
            import jsonschema

            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise invalid(
                    f"`schema` is not a valid JSON Schema: {exc.message}", where
                ) from None

    def settings_asked(self, args: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
        """The request settings this step asks its provider to honour (providers/honours.py),
        each with where ``with:`` gives it."""
        asked: dict[str, tuple[Any, ...]] = {
            name: (name,)
            for name in ("temperature", "seed", "max_tokens", "schema")
            if args.get(name) is not None
        }
        if args.get("format") == "json":
            asked["format"] = ("format",)
        messages = args.get("messages")
        for i, m in enumerate(messages if isinstance(messages, list) else ()):
            if isinstance(m, dict) and m.get("images"):
                asked.setdefault("images", ("messages", i, "images"))
        params = args.get("params")
        for key in params if isinstance(params, dict) else ():
            asked[f"params.{key}"] = ("params", key)
        return asked

    def output_shape(self, args: Mapping[str, Any]) -> Shape:
        shape = from_doc(self.output_doc)
        schema = args.get("schema")
        if not isinstance(schema, dict):
            return shape
        # `json` holds the reply as the step's schema promises it (checked before it passes).
        fields = {**shape.fields, "json": from_json_schema(schema)}
        return Shape("object", fields=fields, closed=True)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        messages = args.get("messages") or []
        images = [i for m in messages if isinstance(m, dict) for i in m.get("images") or []]
        return reference_files(images, root)

    def key_extra(self, args: Mapping[str, Any], env: StepEnv) -> dict[str, Any]:
        provider = resolve_provider(env, args.get("provider"), "text", None)
        return {"provider": provider.profile()}

    def _messages(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if args.get("system"):
            out.append({"role": "system", "content": str(args["system"])})
        for m in args.get("messages") or []:
            msg: dict[str, Any] = {"role": str(m["role"]), "content": str(m.get("content", ""))}
            if m.get("images"):
                msg["images"] = [str(i) for i in m["images"]]
            out.append(msg)
        if "prompt" in args:
            out.append({"role": "user", "content": str(args["prompt"])})
        return out

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        provider = resolve_provider(ctx.env, args.get("provider"), "text", ctx.step_id)
        profile = provider.profile()
        messages = with_feedback(self._messages(args), list(ctx.feedback), list(ctx.review))
        loaded: list[dict[str, Any]] = []
        for m in messages:
            images = [load_reference(ctx, ref) for ref in m.get("images", [])]
            loaded.append({**m, "images": images} if images else dict(m))
        schema = args.get("schema")
        fmt = "json" if args.get("format") == "json" or schema is not None else None
        request = TextRequest(
            messages=loaded,
            model=args.get("model"),
            temperature=args.get("temperature"),
            seed=args.get("seed"),
            format=fmt,
            json_schema=schema,
            max_tokens=args.get("max_tokens"),
            params=dict(args.get("params") or {}),
        )
        # A retry with check feedback is a new request, its round keeps their keys apart; a
        # transient retry is the same request under the same key (the ledger decides on it).
        round_ = ctx.check_round if ctx.feedback else None
        canonical = canonical_request(request)  # once: the key and the ledger's summary
        request.idempotency_key = key_of(canonical, profile, round_)
        if round_ is not None:
            _unlike_earlier_rounds(ctx, request, profile)
            canonical = canonical_request(request)  # its seed may have changed
        batch = batching(ctx, provider, args.get("batch"), request.idempotency_key)
        record = await self._call(ctx, provider, request, canonical, batch=batch)
        refusal = (record.get("metadata") or {}).get("refusal")
        if refusal:  # the model declined: its words, not a parse error about an empty reply
            raise StepFailure(f"{provider.name}: the model refused: {refusal}", check=True)
        text = str(record["text"])
        value = parse_json_reply(text) if fmt == "json" else None
        if schema is not None:
            check_schema(value, schema)
        usage = {k: v for k, v in (record.get("usage") or {}).items() if isinstance(v, int)}
        output = {
            "text": text,
            "json": value,
            "usage": usage,
            "model": (record.get("metadata") or {}).get("model") or args.get("model"),
            "provider": provider.name,
            "provider_profile": profile,
            "idempotency_key": request.idempotency_key,
            "sha256": record["digest"],
        }
        # Whether the ledger answered is history, not the result: a fresh run gives the same
        # output, so it is said in the execution's report (runs show, the page), never read by
        # a downstream key.
        report = {"reused_calls": [request.idempotency_key]} if record.get("reused") else None
        return StepResult(output=output, artifacts=[record["digest"]], usage=usage, report=report)

    async def _call(
        self,
        ctx: StepContext,
        provider: Provider,
        request: TextRequest,
        summary: dict[str, Any],
        *,
        batch: bool = False,
    ) -> dict[str, Any]:
        """The ledger record of this call: reused when completed before, else made now."""
        key = request.idempotency_key
        # One look at the ledger for a new call; the stored result is read only when it is done.
        known = ctx.ledger.record(key) if ctx.ledger is not None else None
        done = (
            ctx.ledger.completed(key)
            if ctx.ledger is not None and known is not None and known.get("status") == "completed"
            else None
        )
        if done is not None and isinstance(done.get("text"), str):
            ctx.log(f"llm: reusing the completed call {key[:12]}")
            return {
                **done,
                "digest": ctx.objects.put_bytes(done["text"].encode("utf-8")),
                "reused": True,
            }
        if ctx.ledger is not None:
            refused = uncertain_reason(
                provider, key, known, retry_uncertain=ctx.env.retry_uncertain
            )
            if refused is not None:
                raise StepFailure(f"{provider.name}: {refused}")
        meta = {
            "provider": provider.name,
            "profile": provider.profile(),
            "run_id": ctx.run_id,
            "step": ctx.step_id,
            "attempt": ctx.attempt,
            "request": summary,
        }
        if batch:
            return await self._batched(ctx, provider, request, meta)
        if ctx.ledger is not None:
            ctx.ledger.begin(key, jsonable(meta))
            await ctx.ledger.durable()  # in flight, committed, before the provider is called
        request.tracker = tracker(ctx.ledger, key)
        log = CallLog(ctx.log_dir, key, provider.redactor)
        asked = Event("request", meta)  # written with the outcome: one open per call

        def retrying(attempt: int, exc: ProviderError, delay: float) -> None:
            log.err("retry", {"attempt": attempt, "delay_s": round(delay, 3), **error_summary(exc)})
            ctx.log(f"llm: {exc.message} (retrying in {delay:.1f}s)")

        try:
            result: TextResult = await with_provider_retries(
                provider,
                lambda: provider.generate_text(request),
                on_retry=retrying,
                retry_uncertain=ctx.env.retry_uncertain,
            )
        except asyncio.CancelledError as exc:  # the step's timeout, or a cancelled run
            cancelled_in_flight(ctx.ledger, key, request.tracker, exc)
            raise
        except ProviderError as exc:
            if ctx.ledger is not None:  # the ledger first: what was paid matters more than a log
                ctx.ledger.fail(key, exc.message, failed_status(exc))
            log.write_out(asked)
            log.err("failed", error_summary(exc))
            reason = failure_reason(provider, exc)
            raise StepFailure(reason, retryable=exc.transient) from None
        return await self._keep(ctx, provider, key, result, log, asked)

    async def _batched(
        self, ctx: StepContext, provider: Provider, request: TextRequest, meta: dict[str, Any]
    ) -> dict[str, Any]:
        """The call answered through the provider's batch API (batch mode): the same request
        under the same key, journaled as the ledger's row once the batch has answered it.
        Raises BatchPending while it waits, StepFailure when its request failed in the batch
        (retryable when the service's failure was transient: a later batch sends it again)."""
        key = request.idempotency_key
        api, line = await asked_in_batch(ctx, provider, key, lambda api: api.text_body(request))
        log = CallLog(ctx.log_dir, key, provider.redactor)
        asked = Event("request", {**meta, "batch": True})
        if ctx.ledger is not None:
            ctx.ledger.begin(key, jsonable({**meta, "batch": True}))
            ctx.ledger.sent(key)
        if line.body is None:
            if ctx.ledger is not None:
                ctx.ledger.fail(key, line.message, "failed")
                await ctx.ledger.durable()
            log.write_out(asked)
            log.err("failed", {"batch": True, "status": line.status_code, "message": line.message})
            raise StepFailure(f"{provider.name} (batch): {line.message}", retryable=line.transient)
        try:
            result = api.text_result(line.body, request)
        except ProviderError as exc:
            if ctx.ledger is not None:
                ctx.ledger.fail(key, exc.message, "failed")
                await ctx.ledger.durable()
            raise StepFailure(exc.message) from None
        return await self._keep(ctx, provider, key, result, log, asked)

    async def _keep(
        self,
        ctx: StepContext,
        provider: Provider,
        key: str,
        result: TextResult,
        log: CallLog,
        asked: Event,
    ) -> dict[str, Any]:
        """The call's ledger record of ``result``, recorded, its object and log written."""
        # A reply that echoes a key (a prompt-injected model, a proxy) is masked before it is
        # stored anywhere: object, ledger, output, log.
        text = provider.redactor.redact(result.text)
        data = text.encode("utf-8")
        record = {
            "text": text,
            "digest": hashlib.sha256(data).hexdigest(),
            "metadata": provider.redactor.redact_json(jsonable(result.metadata)),
            "usage": dict(result.usage),
        }
        # Recorded before its object is written: the record holds the text itself, so a crash
        # in between loses nothing (a reuse makes the object again from it).
        if ctx.ledger is not None:
            ctx.ledger.complete(key, record)
            await ctx.ledger.durable()
        answered = Event("response", {**record, "text": text[:2000]})

        def keep() -> None:
            # The object's fsyncs and the call log's one open, off the event loop. After the
            # ledger: a logged response always means a recorded, never-repaid call.
            # Never fsynced: the ledger holds the text (recorded above), so an object a power
            # loss damages is made again from it by the next apply, and nothing is paid twice.
            ctx.objects.put_bytes(data, recoverable=True)
            log.write_out(asked, answered)

        # Waiting on the disk, not using the CPU: the slot is free meanwhile, so the fsyncs of
        # every element that got its reply overlap (not only those of the --jobs holding one).
        async with waiting():
            await in_order(keep)  # callers resume in call order: elements finish as before
        return record
