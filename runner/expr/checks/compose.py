"""Composition: ``all``, ``any``, ``not``, ``{rule: name}`` and the constants true/false."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check

_RULE_LIST = {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/rule"}}


class _Group(Rule):
    def __init__(self, rules: list[Rule], *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.rules = tuple(rules)

    def children(self) -> tuple[Rule, ...]:
        return self.rules


class AllRule(_Group):
    """Every rule passes; stops at the first failure (like ``and``), which it reports."""

    kind = "all"

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        for rule in self.rules:
            verdict = rule.evaluate_sync(context, root=root)
            if not verdict.passed:
                return verdict
        return Verdict(True)

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        for rule in self.rules:
            verdict = await rule.evaluate(context, root=root)
            if not verdict.passed:
                return verdict
        return Verdict(True)


class AnyRule(_Group):
    """Some rule passes; stops at the first pass (like ``or``). Fails with every reason."""

    kind = "any"

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        verdicts = []
        for rule in self.rules:
            verdict = rule.evaluate_sync(context, root=root)
            if verdict.passed:
                return verdict
            verdicts.append(verdict)
        return self._combine(verdicts)

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        verdicts = []
        for rule in self.rules:
            verdict = await rule.evaluate(context, root=root)
            if verdict.passed:
                return verdict
            verdicts.append(verdict)
        return self._combine(verdicts)

    def _combine(self, verdicts: list[Verdict]) -> Verdict:
        reasons = "; ".join(r for v in verdicts for r in v.reasons)
        return Verdict(
            False,
            [f"any: none of {len(verdicts)} alternatives passed ({reasons})"],
            error=any(v.error for v in verdicts),
        )


class NotRule(Rule):
    """Passes when its rule fails; an error stays an error (never a pass)."""

    kind = "not"

    def __init__(self, rule: Rule, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.rule = rule

    def children(self) -> tuple[Rule, ...]:
        return (self.rule,)

    def _invert(self, verdict: Verdict) -> Verdict:
        if verdict.error:
            return verdict
        if verdict.passed:
            return Verdict(
                False, [f"not: expected this to fail, but it passed: {self.rule.describe()}"]
            )
        return Verdict(True)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return self._invert(self.rule.evaluate_sync(context, root=root))

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return self._invert(await self.rule.evaluate(context, root=root))


class NamedRule(Rule):
    """``{rule: name}``: a rule set declared once under the pipeline's ``rules:``."""

    kind = "rule"

    def __init__(self, name: str, rule: Rule, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.name = name
        self.rule = rule

    def children(self) -> tuple[Rule, ...]:
        return (self.rule,)

    @cached_property
    def rules_used(self) -> frozenset[str]:
        return frozenset({self.name}) | self.rule.rules_used

    def describe(self) -> str:
        return f"rule '{self.name}'"

    def _prefix(self, verdict: Verdict) -> Verdict:
        if verdict.passed:
            return verdict
        return Verdict(False, [f"rule '{self.name}': {r}" for r in verdict.reasons], verdict.error)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return self._prefix(self.rule.evaluate_sync(context, root=root))

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return self._prefix(await self.rule.evaluate(context, root=root))


class All(CheckType):
    name = "all"
    description = (
        "Passes when every listed rule passes (evaluated in order, stops at the first "
        "failure and reports it)."
    )
    schema: ClassVar[dict[str, Any]] = _RULE_LIST

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        rules = [scope.compile(r, (*path, i)) for i, r in enumerate(args)]
        return AllRule(rules, raw=args, where=scope.where(path))


class Any_(CheckType):
    name = "any"
    description = (
        "Passes when at least one listed rule passes (in order, stops at the first "
        "pass); fails with the reasons of all."
    )
    schema: ClassVar[dict[str, Any]] = _RULE_LIST

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        rules = [scope.compile(r, (*path, i)) for i, r in enumerate(args)]
        return AnyRule(rules, raw=args, where=scope.where(path))


class Not(CheckType):
    name = "not"
    description = "Passes when the given rule fails (a rule that cannot be evaluated still fails)."
    schema: ClassVar[dict[str, Any]] = {"$ref": "#/$defs/rule"}

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        return NotRule(scope.compile(args, path), raw=args, where=scope.where(path))


class Ref(CheckType):
    name = "rule"
    description = "The named rule set declared under the pipeline's top-level `rules:`."
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "description": "Name of a rule declared under `rules:`.",
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        rule = scope.named_rule(args, path)
        return NamedRule(args, rule, raw=args, where=scope.where(path))


for _check in (All(), Any_(), Not(), Ref()):
    register_check(_check)
