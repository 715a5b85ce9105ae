"""`human_gate`: stop the run until a person approves, rejects or asks for a revision.

The step body never runs: the engine handles gates (runner/engine/run/gates.py), because a gate
reads and writes decisions in the journal, which step bodies never touch. This type declares the
arguments (what the reviewer sees) and checks them at compile time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location
from .base import StepContext, StepResult, StepType, invalid, reference_files


class HumanGateStep(StepType):
    name: ClassVar[str] = "human_gate"
    shareable: ClassVar[bool] = False  # a human decision is never cache
    version: ClassVar[str] = "1"
    description: ClassVar[str] = (
        "Suspend the run until `runner decide RUN GATE approve|reject|revise` (exit 7)."
    )
    # Read by the interpreter: steps of this type are decided, not run.
    is_gate: ClassVar[bool] = True
    output_doc: ClassVar[dict[str, str]] = {
        "decision": "string: approve, reject or revise",
        "by": "string: who decided",
        "comment": "string: the decision's comment (or null)",
        "input": "the revised input given with `revise` (or null)",
        "round": "integer: the decision round (1, then one more per revision)",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "summary": {
                "type": "string",
                "description": "What the reviewer is asked to decide (may use ${{ }}).",
            },
            "show": {
                "description": "label -> value shown to the reviewer as a table "
                "(e.g. upstream outputs); a mapping or one ${{ }}.",
                "type": ["object", "string"],
            },
            "images": {
                "description": "Object digests or workspace paths of images to show.",
                "type": ["array", "string"],
            },
            "revise": {
                "type": "string",
                "description": "Step id re-run with the reviewer's input as feedback "
                "when the decision is `revise`.",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        revise = args.get("revise")
        if isinstance(revise, str) and "${{" in revise:
            raise invalid("human_gate: `revise` is a step id, not an expression", where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        # A decision is about what was shown: an image swapped under its name is asked again.
        return reference_files(args.get("images"), root, existing=True)

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        raise RuntimeError("human_gate steps are decided by the engine, never run")
