"""`hash`: canonical JSON and sha256 of a value, with excluded keys and unordered lists."""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import StepFailure
from ..state.canonical import CanonicalError, canonical_json, prepare, sha256_hex
from .base import StepContext, StepResult, StepType


class HashStep(StepType):
    name = "hash"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
    version = "1"
    description = "Canonical JSON and sha256 of `value` (excluded keys, unordered list paths)."
    predictable: ClassVar[bool] = True  # runner plan computes it to see past it
    output_doc: ClassVar[dict[str, str]] = {
        "canonical": "string: `value` as canonical JSON",
        "sha256": "string: its sha256 (64 hex)",
        "short": "string: the first `length` hex characters (16 by default)",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["value"],
        "properties": {
            "value": {"description": "Any JSON value."},
            "exclude": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Top-level keys left out of the hash.",
            },
            "unordered": {
                "description": "Dotted paths of lists sorted before hashing: a list of paths "
                "(sorted by value) or a mapping path -> sort key ('f1|f2').",
                "type": ["array", "object"],
            },
            "length": {
                "type": "integer",
                "minimum": 4,
                "maximum": 64,
                "description": "Length of the short hash (default 16).",
            },
        },
    }

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        try:
            doc = prepare(
                args["value"],
                exclude=args.get("exclude") or (),
                unordered=args.get("unordered") or (),
            )
            text = canonical_json(doc)
        except CanonicalError as exc:
            raise StepFailure(f"cannot hash value: {exc}") from None
        full = sha256_hex(text.encode("utf-8"))
        return StepResult(
            output={"canonical": text, "sha256": full, "short": full[: int(args.get("length", 16))]}
        )
