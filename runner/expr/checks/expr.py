"""``expr``: a sandboxed expression; truthy passes. Also the bare-string form of a rule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .. import Compiled, Expression, Reference
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check, show


class ExprRule(Rule):
    kind = "expr"

    def __init__(self, expression: Expression, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.expression = expression

    def own_values(self) -> Iterable[Compiled]:
        return (self.expression,)

    @property
    def refs(self) -> frozenset[Reference]:
        # The expression's own set: the compiler reads it for every `when`, and walking
        # expressions() into a new frozenset cost more than compiling a cached expression.
        if self.message is None:
            return self.expression.refs
        return frozenset(r for e in self.expressions() for r in e.refs)

    def describe(self) -> str:
        return f"`{self.expression.source}`"

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        value = self.expression.evaluate(context)
        if value:
            return Verdict(True)
        from ._measured import measured  # only a failure pays for the reading

        reading = measured(self.expression.source, context)
        found = f", found {show(value)}" if reading is None else f": {reading}"
        return Verdict(False, [f"expr: expected `{self.expression.source}` to be true{found}"])


class Expr(CheckType):
    name = "expr"
    description = "A sandboxed expression (bare, or one ${{ }}); passes when its value is truthy."
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "The expression, e.g. `${{ params.n > 3 }}` or `params.n > 3`.",
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        expression = scope.expression(args, path)
        return ExprRule(expression, raw=args, where=expression.where)


register_check(Expr())
