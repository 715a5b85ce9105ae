"""`verify_card`: check a stored card's shape and whether it drifted from the current inputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location, StepFailure
from .base import ResultStatus, StepContext, StepResult, StepType
from .card import INPUTS_ARG, SPEC_ARG, spec_at, validate_spec_arg
from .cards import detect_drift


class VerifyCardStep(StepType):
    name = "verify_card"
    version = "1"
    description = (
        "Shape-check a stored card, rebuild it from the current inputs and compare "
        "hashes: drift marks the execution partial with the drifted fields."
    )
    output_doc: ClassVar[dict[str, str]] = {
        "verified": "boolean: the stored card matches one rebuilt from the current inputs",
        "hash": "string: the stored card's hash",
        "current_hash": "string: the rebuilt card's hash, when they differ",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["spec", "card", "inputs"],
        "properties": {
            "spec": SPEC_ARG,
            "card": {
                "type": "object",
                "description": "The stored card step output ({card, hash, ...}).",
            },
            "inputs": INPUTS_ARG,
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        validate_spec_arg(args, root, where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return [args["spec"]]

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        spec = spec_at(ctx.root, args["spec"])
        stored = args["card"]
        if not isinstance(stored, dict) or "card" not in stored or "hash" not in stored:
            raise StepFailure("verify_card: `card` must be a card step output {card, hash}")
        report = detect_drift(spec, stored["card"], stored["hash"], args["inputs"])
        if report.problems:
            raise StepFailure(f"{spec.title} is invalid: " + "; ".join(report.problems))
        if report.drifted:
            return StepResult(
                output={
                    "verified": False,
                    "hash": report.stored_hash,
                    "current_hash": report.current_hash,
                },
                status=ResultStatus.PARTIAL,
                report={
                    "drifted_fields": report.fields,
                    "stored_hash": report.stored_hash,
                    "current_hash": report.current_hash,
                },
            )
        return StepResult(output={"verified": True, "hash": report.stored_hash})
