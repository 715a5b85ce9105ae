"""`card`: build a prompt card from a card spec and inputs (see runner.steps.cards)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import InvalidPipeline, Location, StepFailure
from ..source.paths import inside
from .base import StepContext, StepResult, StepType
from .cards import CardSpec, ContractViolation, build_card, load_spec

SPEC_ARG = {"type": "string", "description": "Card spec YAML file, relative to the pipeline."}
INPUTS_ARG = {"type": "object", "description": "The card's inputs by name (resolved values)."}


def spec_at(root: Path, rel: str, where: Location | None = None) -> CardSpec:
    """Load the card spec ``rel`` under ``root``. Raises InvalidPipeline."""
    return load_spec(inside(root, rel, where=where))


def validate_spec_arg(args: Mapping[str, Any], root: Path, where: Location | None) -> None:
    """Compile-time check shared by card steps: a literal spec path must load cleanly."""
    rel = args.get("spec")
    if isinstance(rel, str) and "${{" not in rel:
        path = inside(root, rel, where=where)
        if not path.is_file():
            raise InvalidPipeline(f"card spec not found: {rel}", where=where)
        load_spec(path)


class CardStep(StepType):
    name = "card"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
    version = "1"
    description = "Build a deterministic prompt card (canonical JSON + 16-hex hash) from inputs."
    predictable: ClassVar[bool] = True  # runner plan computes it to see past it
    output_doc: ClassVar[dict[str, str]] = {
        "card": "object: the card built from `inputs` (its fields as the spec orders them)",
        "hash": "string: the card's 16-hex hash (of its canonical JSON)",
        "title": "string: the spec's title",
        "schema_version": "the spec's schema_version",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["spec", "inputs"],
        "properties": {"spec": SPEC_ARG, "inputs": INPUTS_ARG},
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        validate_spec_arg(args, root, where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return [args["spec"]]

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        spec = spec_at(ctx.root, args["spec"])
        try:
            built = build_card(spec, args["inputs"])
        except ContractViolation as exc:
            raise StepFailure(f"card contract violated: {exc}") from None
        return StepResult(
            output={
                "card": built.card,
                "hash": built.hash,
                "title": spec.title,
                "schema_version": spec.schema_version,
            }
        )
