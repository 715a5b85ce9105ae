"""``expr``: a sandboxed expression; truthy passes. Also the bare-string form of a rule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location
from ..expr import Compiled, Expression
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check, show


class ExprRule(Rule):
    kind = "expr"

    def __init__(self, expression: Expression, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.expression = expression

    def own_values(self) -> Iterable[Compiled]:
        return (self.expression,)

    def describe(self) -> str:
        return f"`{self.expression.source}`"

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        value = self.expression.evaluate(context)
        if value:
            return Verdict(True)
        return Verdict(
            False, [f"expr: expected `{self.expression.source}` to be true, found {show(value)}"]
        )


class Expr(CheckType):
    name = "expr"
    description = "A sandboxed expression (bare, or one ${{ }}); passes when its value is truthy."
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "The expression, e.g. `${{ params.n > 3 }}` or `params.n > 3`.",
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        return ExprRule(scope.expression(args, path), raw=args, where=scope.where(path))


register_check(Expr())
