"""``fail``: always fails with its message (stop a run deliberately)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .. import Compiled, evaluate_value
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check


class FailRule(Rule):
    kind = "fail"

    def __init__(self, text: Compiled, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.text = text

    def own_values(self) -> Iterable[Compiled]:
        return (self.text,)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return Verdict(False, [str(evaluate_value(self.text, context))])


class Fail(CheckType):
    name = "fail"
    description = "Always fails, with this message as the reason (to stop a run on purpose)."
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "The reason to report; may hold ${{ }} expressions.",
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        return FailRule(scope.value(args, path), raw=args, where=scope.where(path))


register_check(Fail())
