"""Build a card from inputs: evaluate the spec's lets and fields, type-check, canonicalise, hash.

No silent fallback: a required input that is missing or null is a ContractViolation naming the
card, its key and the input; an explicit empty list is a value like any other. Nothing is cut
short: text and lists go into the card whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateSyntaxError

from ...errors import ExpressionError
from ...expr import evaluate_value
from ...state.canonical import (
    CanonicalError,
    canonical_json,
    plain_copy,
    prepare,
    prepared_short_hash,
    sort_unordered,
)
from ._fast import FastCard, Unsupported
from ._types import type_problem
from .spec import (
    AllCondition,
    AnyCondition,
    CardSpec,
    Condition,
    ExprCondition,
    FieldDef,
    MatchCondition,
    NotCondition,
    Source,
)

HASH_LENGTH = 16


class ContractViolation(Exception):
    """The inputs break the card's contract (a required input is null, a rule refuses them...).

    ``card`` is the card title, ``key`` the card key (None when it could not be computed) and
    ``field`` the input or dotted field path at fault.
    """

    def __init__(self, card: str, key: Any, field: str, reason: str, key_name: str = "key"):
        self.card = card
        self.key = key
        self.field = field
        self.reason = reason
        shown = canonical_json(key) if key is not None else "?"
        super().__init__(f"{card} {key_name}={shown}: {field}: {reason}")


@dataclass(frozen=True)
class Card:
    """A built card (canonical: unordered lists sorted) and its 16-hex-char hash."""

    card: dict[str, Any]
    hash: str


def card_hash(spec: CardSpec, card: Mapping[str, Any]) -> str:
    """Hash of a card: sha256 (first 16 hex) of its canonical JSON without the excluded keys.

    Unordered lists are sorted first, so the hash does not depend on their order. Raises
    CanonicalError when the card holds a non-JSON value.
    """
    doc = prepare(dict(card), exclude=spec.hash_excluded, unordered=spec.unordered)
    return prepared_short_hash(doc, HASH_LENGTH)


def card_block(
    value: Mapping[str, Any], title: str | None = None, schema_version: int | None = None
) -> str:
    """The prompt block ``[<title> v<schema_version>]\\n<canonical card JSON>\\n\\n``.

    Called as ``card_block(card, title, schema_version)``, or with one argument, a card step's
    output ``{card, hash, title, schema_version}`` (the form used as the Jinja filter
    ``card_block``). Raises ValueError when given neither.
    """
    card: Any = value
    if title is None:
        if not isinstance(value, Mapping) or not {"card", "title", "schema_version"} <= set(value):
            raise ValueError("card_block needs a card step output {card, title, schema_version}")
        card, title, schema_version = value["card"], value["title"], value["schema_version"]
    if schema_version is None:
        raise ValueError("card_block needs the card's schema_version")
    return f"[{title} v{schema_version}]\n{canonical_json(card)}\n\n"


def build_card(spec: CardSpec, inputs: Mapping[str, Any]) -> Card:
    """Build the card of ``spec`` from ``inputs``. Raises ContractViolation."""
    return _Builder(spec, inputs).build()


class _Builder:
    def __init__(self, spec: CardSpec, inputs: Mapping[str, Any]) -> None:
        self.spec = spec
        self.inputs = inputs
        self.key: Any = None
        self.ctx: dict[str, Any] = {}

    def violation(self, field: str, reason: str) -> ContractViolation:
        key = self.key if self.key is not None else self._key_label(self.ctx)
        return ContractViolation(self.spec.title, key, field, reason, self.spec.key_group)

    def build(self) -> Card:
        spec = self.spec
        ctx: dict[str, Any] = {name: self.inputs.get(name) for name in spec.inputs}
        self.ctx = ctx
        unknown = sorted(set(self.inputs) - set(spec.inputs))
        if unknown:
            raise self.violation(unknown[0], "is not a declared input of this card")
        for name, decl in spec.inputs.items():
            value = ctx[name]
            if value is None:
                if decl.required:
                    state = "missing" if name not in self.inputs else "null"
                    raise self.violation(
                        name,
                        f"required input is {state} (pass [] for an intentionally empty "
                        "list; a missing value is never treated as empty)",
                    )
                continue
            problem = type_problem(value, decl.type)
            if problem:
                raise self.violation(name, f"input {problem}")
        fast = _fast_values(spec, ctx)
        if fast is None:  # the reference path, field by field: it names the field at fault
            for name, source in spec.lets:
                ctx[name] = self._evaluate(source, ctx, name)
        slow = (self._evaluate(fd.source, ctx, fd.path) for fd in spec.fields())
        values = iter(fast if fast is not None else slow)
        card: dict[str, Any] = {"schema_version": spec.schema_version}
        for gname, defs in spec.groups.items():
            group: dict[str, Any] = {}
            for fd in defs:
                group[fd.name] = self._check_field(fd, next(values))
            card[gname] = group
            if gname == spec.key_group:
                self.key = group
        try:
            self._canonicalise(card)
        except CanonicalError as exc:
            raise self.violation("card", f"not canonical JSON: {exc}") from None
        return Card(card, prepared_short_hash(card, HASH_LENGTH))

    def _canonicalise(self, card: dict[str, Any]) -> None:
        """What ``prepare`` does, on a card whose envelope this builder just made: each group
        becomes a plain JSON copy (the card shares nothing with the inputs or the spec's
        literals) and each unordered list is sorted. Raises CanonicalError."""
        for gname, defs in self.spec.groups.items():
            group = card[gname] = plain_copy(card[gname], f"$.{gname}")
            for fd in defs:
                if fd.unordered:
                    group[fd.name] = sort_unordered(group[fd.name], fd.sort_key)

    def _key_label(self, ctx: Mapping[str, Any]) -> Any:
        # Best effort, for messages only: the key of a card whose inputs are broken may not exist.
        try:
            key = {
                fd.name: self._source(fd.source, ctx)
                for fd in self.spec.groups[self.spec.key_group]
            }
        except (ExpressionError, _RuleError, TypeError):
            return None
        return key if not any(v is None for v in key.values()) else None

    def _check_field(self, fd: FieldDef, value: Any) -> Any:
        problem = type_problem(value, fd.type, fd.allowed, fd.nullable)
        if problem:
            raise self.violation(fd.path, problem)
        if fd.unordered and fd.sort_key:
            for element in value:
                missing = [
                    k
                    for k in fd.sort_key.split("|")
                    if not isinstance(element, dict) or k not in element
                ]
                if missing:
                    raise self.violation(
                        fd.path, f"element lacks '{missing[0]}' of sort key '{fd.sort_key}'"
                    )
        return value

    def _evaluate(self, source: Source, ctx: Mapping[str, Any], where: str) -> Any:
        try:
            return self._source(source, ctx)
        except ExpressionError as exc:
            raise self.violation(where, str(exc)) from None
        except _RuleError as exc:
            raise self.violation(where, exc.reason) from None

    def _source(self, source: Source, ctx: Mapping[str, Any]) -> Any:
        if source.rules is not None:
            for rule in source.rules:
                if rule.when is None or self._holds(rule.when, ctx):
                    if rule.error is not None:
                        raise _RuleError(rule.error)
                    return evaluate_value(rule.value, ctx)
            raise _RuleError("no rule applies to these inputs")
        if source.items is not None:
            out: list[Any] = []
            for item in source.items:
                if item.for_each is None:
                    if item.when is None or self._holds(item.when, ctx):
                        out.append(evaluate_value(item.value, ctx))
                    continue
                seq = item.for_each.evaluate(ctx)
                if not isinstance(seq, list):
                    raise _RuleError(f"for_each '{item.for_each.source}' is not a list")
                for element in seq:
                    inner = {**ctx, item.as_name: element}
                    if item.when is None or self._holds(item.when, inner):
                        out.append(evaluate_value(item.value, inner))
            return out
        return evaluate_value(source.value, ctx)

    def _holds(self, cond: Condition, ctx: Mapping[str, Any]) -> bool:
        if isinstance(cond, ExprCondition):
            result = cond.expr.evaluate(ctx)
            if not isinstance(result, bool):
                raise _RuleError(
                    f"condition '{cond.expr.source}' gave "
                    f"{type(result).__name__}, expected true or false"
                )
            return result
        if isinstance(cond, MatchCondition):
            text = cond.value.evaluate(ctx)
            if not isinstance(text, str):
                raise _RuleError(
                    f"pattern '{cond.pattern_name}' needs text, "
                    f"'{cond.value.source}' gave {type(text).__name__}"
                )
            return cond.pattern.search(text) is not None
        if isinstance(cond, NotCondition):
            return not self._holds(cond.part, ctx)
        if isinstance(cond, AllCondition):
            return all(self._holds(c, ctx) for c in cond.parts)
        assert isinstance(cond, AnyCondition)
        return any(self._holds(c, ctx) for c in cond.parts)


def _fast_values(spec: CardSpec, ctx: Mapping[str, Any]) -> list[Any] | None:
    """Every field's value (in spec order) from one template render, or None to take the slow
    path."""
    if spec.fast is None:
        try:
            spec.fast = FastCard(spec)
        except (Unsupported, TemplateSyntaxError):
            spec.fast = False
    if spec.fast is False:
        return None
    try:
        values: list[Any] = spec.fast.run(ctx)
    except Exception:  # any failure: the field-by-field path is the reference and names the field
        return None
    return values


class _RuleError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
