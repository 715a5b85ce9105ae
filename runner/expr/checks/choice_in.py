"""``choice_in``: a value is one of a list of allowed choices."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .. import Compiled, evaluate_value
from .base import VALUE_DESCRIPTION, CheckType, Path_, Rule, Scope, Verdict, register_check, show


class ChoiceInRule(Rule):
    kind = "choice_in"

    def __init__(
        self, value: Compiled, choices: Compiled, *, raw: Any, where: Location | None
    ) -> None:
        super().__init__(raw=raw, where=where)
        self.value = value
        self.choices = choices

    def own_values(self) -> Iterable[Compiled]:
        return (self.value, self.choices)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        choices = evaluate_value(self.choices, context)
        if isinstance(choices, dict):
            choices = list(choices)
        if not isinstance(choices, (list, tuple)):
            return Verdict(
                False,
                [f"choice_in: expected the choices to be a list, found {show(choices)}"],
                error=True,
            )
        value = evaluate_value(self.value, context)
        # bool is not an int here: `true` is not a choice of [1, 0]
        if any(type(value) is type(c) and value == c for c in choices) or (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and any(
                isinstance(c, (int, float)) and not isinstance(c, bool) and c == value
                for c in choices
            )
        ):
            return Verdict(True)
        return Verdict(
            False, [f"choice_in: expected one of {show(list(choices), 300)}, found {show(value)}"]
        )


class ChoiceIn(CheckType):
    name = "choice_in"
    description = "Passes when `value` equals one of `choices` (types must match: 1 is not '1')."
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["value", "choices"],
        "additionalProperties": False,
        "properties": {
            "value": {"description": VALUE_DESCRIPTION},
            "choices": {
                "description": "The allowed values: a list, or a ${{ }} expression giving one.",
                "anyOf": [
                    {"type": "array", "minItems": 1},
                    {"type": "string", "pattern": r"\$\{\{"},
                ],
            },
        },
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        return ChoiceInRule(
            scope.value(args["value"], (*path, "value")),
            scope.value(args["choices"], (*path, "choices")),
            raw=args,
            where=scope.where(path),
        )


register_check(ChoiceIn())
