"""``matches``: a text value matches a regular expression (inline, or named in ``patterns:``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .. import Compiled, evaluate_value
from .base import (
    VALUE_DESCRIPTION,
    CheckType,
    Path_,
    Rule,
    Scope,
    Verdict,
    compile_regex,
    register_check,
    show,
)


class MatchesRule(Rule):
    kind = "matches"

    def __init__(
        self,
        value: Compiled,
        regex: re.Pattern[str],
        pattern_name: str | None,
        *,
        raw: Any,
        where: Location | None,
    ) -> None:
        super().__init__(raw=raw, where=where)
        self.value = value
        self.regex = regex
        self.pattern_name = pattern_name

    def own_values(self) -> Iterable[Compiled]:
        return (self.value,)

    def compiled_from(self) -> Any:
        return self.regex.pattern

    @cached_property
    def patterns_used(self) -> frozenset[str]:
        return frozenset({self.pattern_name}) if self.pattern_name else frozenset()

    def _expected(self) -> str:
        named = f"pattern '{self.pattern_name}' " if self.pattern_name else ""
        return f"text matching {named}/{self.regex.pattern}/"

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        value = evaluate_value(self.value, context)
        if not isinstance(value, str):
            return Verdict(
                False,
                [
                    f"matches: expected {self._expected()}, found "
                    f"{type(value).__name__} {show(value)}"
                ],
            )
        if self.regex.search(value):
            return Verdict(True)
        return Verdict(False, [f"matches: expected {self._expected()}, found {show(value)}"])


class Matches(CheckType):
    name = "matches"
    description = (
        "Passes when the text `value` contains a match of the regular expression "
        "(Python `re.search`; anchor with ^ and $ to match the whole text)."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["value"],
        "additionalProperties": False,
        "oneOf": [{"required": ["pattern"]}, {"required": ["pattern_name"]}],
        "properties": {
            "value": {"description": VALUE_DESCRIPTION},
            "pattern": {"type": "string", "description": "An inline Python regular expression."},
            "pattern_name": {
                "type": "string",
                "description": "The name of a pattern declared under `patterns:`.",
            },
        },
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        name = args.get("pattern_name")
        if name is not None:
            regex = scope.regex(name, (*path, "pattern_name"))
        else:
            regex = compile_regex(scope, args["pattern"], (*path, "pattern"))
        return MatchesRule(
            scope.value(args["value"], (*path, "value")),
            regex,
            name,
            raw=args,
            where=scope.where(path),
        )


register_check(Matches())
