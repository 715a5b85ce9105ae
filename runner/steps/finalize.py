"""`finalize`: turn raw generated images into finals that fit a compliance profile.

Takes the iterations an image step produced (or one image digest), finalises each completed one
in a worker thread, stores the final even when it is not compliant (so it can be inspected), and
reports per iteration. One bad iteration fails alone; the step fails only when all of them do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import PIL

from ..errors import InvalidPipeline, Location, StepFailure, StoreError
from .base import StepContext, StepEnv, StepResult, StepType, invalid
from .imaging.finalize import Finalized, FinalizeError, Format, finalize
from .imaging.profiles import Profile, is_path_reference, load_profile

DEFAULT_PROFILE = "youtube"
DEFAULT_CONCURRENCY = 2  # finalising is CPU-bound Pillow work; more threads than cores only queue
COMPLETED = "completed"
FAILED = "failed"


class FinalizeStep(StepType):
    name = "finalize"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
    version = "1"
    description = "Resize, title and encode images to a compliance profile, and check them."
    key_neutral: ClassVar[Mapping[str, str]] = {
        "concurrency": "how many images are finalised at once, never what they become",
    }
    output_doc: ClassVar[dict[str, str]] = {
        "iterations": (
            "list: each image iteration with `final` (object digest), `ext`, `width`, "
            "`height`, `bytes`, `format`, `compliant`, `compliance` (the report), `status`, "
            "`failure` and `error`"
        ),
        "profile": "string: the compliance profile's name",
        "final": "string: with `image:`, the one final image's object digest",
        "ext": "string: with `image:`, its file extension",
        "compliant": "boolean: with `image:`, whether it meets the profile",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "iterations": {
                "type": "array",
                "items": {"type": "object"},
                "description": "The iterations output of an image step: "
                "[{ordinal, raw, status, ...}].",
            },
            "image": {"type": "string", "description": "One raw image, by object digest."},
            "profile": {
                "type": "string",
                "description": "A packaged profile name (youtube, shorts, square) or a path to "
                "a profile .yaml file under the pipeline root.",
            },
            "title": {"type": ["string", "null"], "description": "Text drawn over the image."},
            "format": {"enum": ["jpeg", "png"], "description": "Output format (default jpeg)."},
            "concurrency": {"type": "integer", "minimum": 1, "maximum": 16},
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        has_iterations, has_image = "iterations" in args, "image" in args
        if has_iterations == has_image:
            raise invalid("finalize needs exactly one of `iterations` or `image`", where)
        profile = args.get("profile", DEFAULT_PROFILE)
        if isinstance(profile, str) and "${{" not in profile:
            try:
                load_profile(profile, root=root)
            except InvalidPipeline as exc:
                raise InvalidPipeline(exc.message, where=where, hint=exc.hint) from None

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        profile = args.get("profile", DEFAULT_PROFILE)
        if isinstance(profile, str) and is_path_reference(profile):
            return [Path(profile).as_posix()]
        return []

    def key_extra(self, args: Mapping[str, Any], env: StepEnv) -> dict[str, Any]:
        # A packaged profile can change with runner, and encoders change bytes between Pillow
        # releases: both belong in the key. A profile file is already keyed through reads().
        extra: dict[str, Any] = {"pillow": PIL.__version__}
        profile = args.get("profile", DEFAULT_PROFILE)
        if isinstance(profile, str) and not is_path_reference(profile):
            try:
                extra["profile"] = load_profile(profile).digest
            except InvalidPipeline:
                extra["profile"] = None  # run() raises the clear error
        return extra

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        """Finalise every completed iteration. Raises StepFailure when all iterations fail
        (``check=True`` when every failure is a compliance failure) and InvalidPipeline for an
        unknown profile."""
        profile = load_profile(args.get("profile", DEFAULT_PROFILE), root=ctx.root)
        fmt = _format(args.get("format", "jpeg"))
        title = args.get("title")
        if title is not None and not isinstance(title, str):
            raise StepFailure(f"title must be a string, found {type(title).__name__}")
        iterations = _iterations(args)
        if not iterations:
            raise StepFailure("nothing to finalise: `iterations` is empty")
        limit = asyncio.Semaphore(_concurrency(args.get("concurrency", DEFAULT_CONCURRENCY)))

        async def one(it: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
            return await _finalize_one(ctx, it, profile, title=title, fmt=fmt, limit=limit)

        done = await asyncio.gather(*(one(it) for it in iterations))
        entries = [entry for entry, _ in done]
        artifacts = list(dict.fromkeys(d for _, digests in done for d in digests))
        failed = [e for e in entries if e["status"] != COMPLETED]
        if len(failed) == len(entries):
            reasons = "; ".join(f"#{e['ordinal']} {e['error']}" for e in failed[:4])
            more = f" (and {len(failed) - 4} more)" if len(failed) > 4 else ""
            raise StepFailure(
                f"all {len(entries)} iterations failed: {reasons}{more}",
                check=all(e.get("failure") == "compliance" for e in failed),
                # journaled with the failure, so each iteration's own reason reaches its record
                output={"iterations": entries, "profile": profile.name},
            )
        output: dict[str, Any] = {"iterations": entries, "profile": profile.name}
        if "image" in args:
            only = entries[0]
            output.update(final=only["final"], ext=only["ext"], compliant=only["compliant"])
        report = {
            "completed": len(entries) - len(failed),
            "failed": len(failed),
            "compliance_failed": sum(1 for e in failed if e.get("failure") == "compliance"),
        }
        return StepResult(output=output, artifacts=artifacts, report=report)


async def _finalize_one(
    ctx: StepContext,
    it: dict[str, Any],
    profile: Profile,
    *,
    title: str | None,
    fmt: Format,
    limit: asyncio.Semaphore,
) -> tuple[dict[str, Any], list[str]]:
    """One iteration's entry and the digests it references (raw and final)."""
    entry: dict[str, Any] = {
        **it,
        "seed": it.get("seed"),
        "idempotency_key": it.get("idempotency_key"),
        "raw": it.get("raw"),
        "final": None,
        "ext": None,
        "compliant": None,
        "compliance": None,
        "failure": None,
        "error": None,
    }
    status = it.get("status", COMPLETED)
    if status != COMPLETED:
        # Failed upstream (e.g. the provider refused): nothing to finalise, keep its reason.
        reason = it.get("error") or f"not finalised: iteration is {status}"
        entry.update(status=FAILED, failure="upstream", error=reason)
        return entry, []
    raw = it.get("raw")
    if not isinstance(raw, str):
        entry.update(status=FAILED, failure="finalize", error="finalize: no raw image digest")
        return entry, []
    try:
        data = await asyncio.to_thread(ctx.objects.read_bytes, raw)
    except StoreError as exc:
        entry.update(status=FAILED, failure="finalize", error=f"finalize: {exc.message}")
        return entry, []
    try:
        async with limit:
            fin: Finalized = await asyncio.to_thread(finalize, data, profile, title=title, fmt=fmt)
    except FinalizeError as exc:
        entry.update(status=FAILED, failure="finalize", error=f"finalize: {exc}")
        ctx.log(f"#{entry['ordinal']}: {exc}")
        return entry, [raw]
    final = await asyncio.to_thread(ctx.objects.put_bytes, fin.data)
    entry.update(
        final=final,
        ext=fin.ext,
        width=fin.width,
        height=fin.height,
        bytes=fin.bytes_len,
        format=fin.format,
        compliant=fin.compliant,
        compliance=fin.report.to_json(),
    )
    if fin.compliant:
        entry.update(status=COMPLETED)
    else:
        # Stored anyway so it can be inspected; the iteration fails with the report's text.
        entry.update(status=FAILED, failure="compliance", error=f"compliance: {fin.report.reason}")
    ctx.log(
        f"#{entry['ordinal']}: final {final[:12]} {fin.width}x{fin.height} {fin.ext} "
        f"{fin.bytes_len} bytes, {'compliant' if fin.compliant else fin.report.reason}"
    )
    return entry, [raw, final]


def _iterations(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    if "image" in args:
        image = args["image"]
        if not isinstance(image, str):
            raise StepFailure(f"image must be an object digest, found {type(image).__name__}")
        return [{"ordinal": 1, "raw": image, "status": COMPLETED}]
    items = args.get("iterations")
    if not isinstance(items, list):
        raise StepFailure(f"iterations must be a list, found {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise StepFailure(f"iterations[{i}] must be an object, found {type(item).__name__}")
        out.append({**item, "ordinal": item.get("ordinal", i + 1)})
    return out


def _format(value: Any) -> Format:
    if value == "jpeg":
        return "jpeg"
    if value == "png":
        return "png"
    raise StepFailure(f"format must be jpeg or png, found {value!r}")


def _concurrency(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StepFailure(f"concurrency must be a positive integer, found {value!r}")
    return value
