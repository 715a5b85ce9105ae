"""What every rule check is made of: the compiled Rule, its Verdict, and the check registry.

A rule is compiled once, when the pipeline compiles (expressions, regexes and schemas included),
and evaluated many times. A check type plugs in with one line::

    register_check(MyCheck())

where ``MyCheck`` subclasses ``CheckType`` with a ``name``, a JSON Schema for its arguments
and a ``compile(args, scope, path)`` that returns a ``Rule``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import ExpressionError, Location, RuleError
from .. import (
    Compiled,
    Expression,
    Reference,
    compile_expression,
    compile_value,
    evaluate_value,
    iter_expressions,
)

Path_ = tuple[Any, ...]  # a path inside the pipeline document, e.g. ("steps", "a", "check", 0)

if TYPE_CHECKING:
    import jsonschema


@dataclass
class Verdict:
    """The outcome of a rule: passed, and if not, why (each reason: expected vs found).

    ``error`` marks a rule that could not be evaluated (an expression failed, a command could
    not start): a ``not`` never turns an error into a pass, and a ``when`` should treat it as a
    failure of the step, not a skip.
    """

    passed: bool
    reasons: list[str] = field(default_factory=list)
    error: bool = False


def show(value: Any, limit: int = 120) -> str:
    """A value as a reason shows it: Python repr, clipped."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Rule:
    """A compiled rule. Subclasses implement ``_check`` (sync) or ``_check_async``."""

    kind: ClassVar[str] = "rule"
    #: True when the rule needs no I/O that could block (evaluate_sync may be used)
    is_sync: ClassVar[bool] = True

    def __init__(self, *, raw: Any, where: Location | None, message: Compiled = None) -> None:
        self.raw = raw
        self.where = where
        self.message = message

    # -- structure ---------------------------------------------------------------------------

    def children(self) -> tuple[Rule, ...]:
        return ()

    def own_values(self) -> Iterable[Compiled]:
        """Compiled values (with expressions) this rule evaluates itself."""
        return ()

    def expressions(self) -> Iterator[Expression]:
        """Every expression of this rule and its children (for refs and linting)."""
        yield from iter_expressions(self.message)
        for value in self.own_values():
            yield from iter_expressions(value)
        for child in self.children():
            yield from child.expressions()

    @cached_property
    def refs(self) -> frozenset[Reference]:
        """Every name the rule reads (the compiler adds a DAG edge per ``steps.X``)."""
        return frozenset(r for e in self.expressions() for r in e.refs)

    @cached_property
    def patterns_used(self) -> frozenset[str]:
        return frozenset().union(*(c.patterns_used for c in self.children()))

    @cached_property
    def rules_used(self) -> frozenset[str]:
        return frozenset().union(*(c.rules_used for c in self.children()))

    @cached_property
    def sync(self) -> bool:
        """True when this rule and all its children can be evaluated without awaiting."""
        return self.is_sync and all(c.sync for c in self.children())

    def describe(self) -> str:
        return f"{self.kind}: {show(self.raw, 80)}"

    def fingerprint(self) -> list[Any]:
        """What decides this rule's verdicts, as JSON: its kind, its source, what it was
        compiled from beyond that (a named pattern's regex, a schema file's schema) and its
        children's (a named rule's definition). A step's checks join its key by it: a result
        that passed other checks is not what running the step now would give."""
        return [
            self.kind,
            self.raw,
            self.compiled_from(),
            [c.fingerprint() for c in self.children()],
        ]

    def compiled_from(self) -> Any:
        """What the rule holds beyond its source text (None when nothing)."""
        return None

    def own_files(self) -> dict[str, bool]:
        """The files (relative to the root) this rule reads when it is evaluated, each with
        whether it must exist (a declared input) or is keyed only while it does (a script a
        command names)."""
        return {}

    def files(self) -> dict[str, bool]:
        """Every file this rule and its children read: the step's key hashes them, so the
        no-op fingerprint lists them too (what it lists is what keys hashed). A result whose
        check read other bytes is not what running the step now would give."""
        out = dict(self.own_files())
        for child in self.children():
            for rel, required in child.files().items():
                out[rel] = out.get(rel, False) or required
        return out

    # -- evaluation --------------------------------------------------------------------------

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        raise TypeError(f"rule '{self.kind}' must be evaluated with `await rule.evaluate()`")

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return self._check(context, root)

    def evaluate_sync(self, context: Mapping[str, Any], *, root: Path) -> Verdict:
        """Evaluate without an event loop; only for rules whose ``sync`` is true."""
        try:
            verdict = self._check(context, root)
        except ExpressionError as exc:
            verdict = Verdict(False, [f"{self.kind}: {exc.message}"], error=True)
        return self._with_message(verdict, context)

    async def evaluate(self, context: Mapping[str, Any], *, root: Path) -> Verdict:
        """Evaluate the rule against ``context`` (params, steps, item, ...). Never raises for
        a failing or unevaluable rule: that is a Verdict with reasons."""
        try:
            verdict = await self._check_async(context, root)
        except ExpressionError as exc:
            verdict = Verdict(False, [f"{self.kind}: {exc.message}"], error=True)
        return self._with_message(verdict, context)

    def _with_message(self, verdict: Verdict, context: Mapping[str, Any]) -> Verdict:
        if verdict.passed or self.message is None:
            return verdict
        try:
            text = evaluate_value(self.message, context)
        except ExpressionError as exc:
            return Verdict(False, [*verdict.reasons, f"message: {exc.message}"], verdict.error)
        return Verdict(False, [str(text)], verdict.error)


class ConstRule(Rule):
    kind = "constant"

    def __init__(self, *, value: bool, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.value = value

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        return Verdict(True) if self.value else Verdict(False, ["the rule is `false`"])


class CheckType(ABC):
    """A named check (the key of a rule mapping). Register an instance with register_check."""

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[dict[str, Any]]  # JSON Schema of the check's arguments

    @abstractmethod
    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        """Compile ``args`` (already valid against ``schema``); raise RuleError via scope."""


# The built-in checks by name, and the module of this package that registers each: imported
# when the check is first asked for, so a run whose rules are all expressions loads none of the
# others (~2.5 ms of every start-up when all nine were imported to register).
_BUILT_IN = {
    "all": "compose",
    "any": "compose",
    "not": "compose",
    "rule": "compose",
    "expr": "expr",
    "fail": "fail",
    "file_nonempty": "file_nonempty",
    "choice_in": "choice_in",
    "matches": "matches",
    "json_schema": "json_schema",
    "exec": "exec",
    "collection_has": "collection_has",
}


class CheckRegistry(MutableMapping[str, CheckType]):
    """The registered checks by name; a built-in one is there from the start, its module
    imported (which registers it) when it is first looked up."""

    def __init__(self) -> None:
        self._checks: dict[str, CheckType] = {}
        self._unloaded = set(_BUILT_IN)  # built-in names whose module is not imported yet

    def _load(self, name: str) -> None:
        if name in self._unloaded:
            import_module(f"{__package__}.{_BUILT_IN[name]}")  # (it registers its checks)

    def __getitem__(self, name: str) -> CheckType:
        self._load(name)
        return self._checks[name]

    def __setitem__(self, name: str, check: CheckType) -> None:
        self._checks[name] = check

    def __delitem__(self, name: str) -> None:
        self._load(name)
        del self._checks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._checks or name in self._unloaded

    def __iter__(self) -> Iterator[str]:
        return iter([*self._checks, *(n for n in _BUILT_IN if n in self._unloaded)])

    def __len__(self) -> int:
        return len(self._checks) + len(self._unloaded)


CHECKS = CheckRegistry()


def register_check(check: CheckType, *, replace: bool = False) -> CheckType:
    """Make ``check`` usable as ``{<check.name>: args}`` in every rule compiled afterwards."""
    name = check.name
    if type(check).__module__ == f"{__package__}.{_BUILT_IN.get(name)}":  # its module loads
        if name not in CHECKS._unloaded:
            return check  # replaced before its module was imported: the replacement stays
    elif name in CHECKS and not replace:
        raise ValueError(f"check '{name}' is already registered")
    CHECKS._unloaded.discard(name)
    CHECKS[name] = check
    _VALIDATORS.pop(name, None)
    return check


_VALIDATORS: dict[str, jsonschema.protocols.Validator] = {}


def _validator(check: CheckType) -> jsonschema.protocols.Validator:
    found = _VALIDATORS.get(check.name)
    if found is None:
        # Nested rules are compiled (and their errors located) one by one, so here a
        # nested rule may be anything.
        schema = {**check.schema, "$defs": {"rule": True}}
        import jsonschema  # on first use: most pipelines' rules are plain expressions

        found = _VALIDATORS[check.name] = jsonschema.Draft202012Validator(schema)
    return found


def did_you_mean(name: str, known: Iterable[str]) -> str:
    import difflib  # only for a mistake (~1 ms of every start-up otherwise)

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


@dataclass
class Scope:
    """Everything compiling one rule needs: locations, declared patterns and named rules."""

    where_of: Callable[[Path_], Location | None]
    patterns: Mapping[str, str]
    named: Mapping[str, Any]
    root: Path
    _regexes: dict[str, re.Pattern[str]] = field(default_factory=dict)
    _compiled_named: dict[str, Rule] = field(default_factory=dict)
    _compiling: list[str] = field(default_factory=list)
    # A rule's location is asked for by each layer that compiles it (rule, check, expression).
    _located: dict[Path_, Location | None] = field(default_factory=dict)

    def where(self, path: Path_) -> Location | None:
        """The location of ``path``, or of its nearest located ancestor."""
        try:
            if path in self._located:  # most paths are new: no KeyError raised for them
                return self._located[path]
        except TypeError:  # an unhashable part: just look it up
            return self._locate(path)
        if len(self._located) > 4096:
            self._located.clear()
        found = self._located[path] = self._locate(path)
        return found

    def _locate(self, path: Path_) -> Location | None:
        found = self.where_of(path)  # almost always located itself: no slicing
        n = len(path)
        while found is None and n > 0:
            n -= 1
            found = self.where_of(path[:n])
        return found

    def error(self, message: str, path: Path_, hint: str | None = None) -> RuleError:
        return RuleError(message, where=self.where(path), hint=hint)

    def value(self, raw: Any, path: Path_) -> Compiled:
        """Compile a value that may hold ``${{ }}`` (errors located at ``path``)."""
        return compile_value(raw, lambda sub: self.where((*path, *sub)))

    def expression(self, text: str, path: Path_) -> Expression:
        """A bare expression or exactly one ``${{ }}``."""
        stripped = text.strip()
        if stripped.startswith("${{") and stripped.endswith("}}") and stripped.count("${{") == 1:
            stripped = stripped[3:-2].strip()
        elif "${{" in stripped:
            raise self.error(
                f"a rule string must be one expression, found text around ${{{{ }}}}: {show(text)}",
                path,
            )
        # Located once, not cached: the rule reuses the expression's location, and a cache
        # entry per `when` would outlive the compile (the plan keeps its rulebook).
        return compile_expression(stripped, self._locate(path))

    def regex(self, name: str, path: Path_) -> re.Pattern[str]:
        """The compiled pattern declared as ``patterns: {name: ...}``."""
        if name not in self.patterns:
            raise self.error(
                f"unknown pattern '{name}'{did_you_mean(name, self.patterns)}",
                path,
                hint=f"declared patterns: {sorted(self.patterns) or 'none'}",
            )
        if name not in self._regexes:
            self._regexes[name] = compile_regex(self, self.patterns[name], ("patterns", name))
        return self._regexes[name]

    def named_rule(self, name: str, path: Path_) -> Rule:
        """The named rule set ``rules: {name: ...}``, compiled once (cycles are refused)."""
        if name not in self.named:
            raise self.error(
                f"unknown rule '{name}'{did_you_mean(name, self.named)}",
                path,
                hint=f"declared rules: {sorted(self.named) or 'none'}",
            )
        if name in self._compiling:
            cycle = " -> ".join([*self._compiling[self._compiling.index(name) :], name])
            raise self.error(f"rule '{name}' refers to itself: {cycle}", path)
        if name not in self._compiled_named:
            self._compiling.append(name)
            try:
                self._compiled_named[name] = self.compile(self.named[name], ("rules", name))
            finally:
                self._compiling.pop()
        return self._compiled_named[name]

    def compile(self, raw: Any, path: Path_) -> Rule:
        """Compile one rule in any of its YAML forms."""
        if isinstance(raw, str):  # most rules: one expression (the check locates it)
            return CHECKS["expr"].compile(raw, self, path)
        if isinstance(raw, bool):
            return ConstRule(value=raw, raw=raw, where=self.where(path))
        if isinstance(raw, list):  # a list is `all:` (composition is itself a set of checks)
            if not raw:
                raise self.error("an empty list of rules", path)
            return CHECKS["all"].compile(raw, self, path)
        if not isinstance(raw, dict) or not raw:
            raise self.error(
                f"a rule is an expression string, a list or a mapping, found {show(raw)}", path
            )
        return self._compile_mapping(raw, path)

    def _compile_mapping(self, raw: dict[str, Any], path: Path_) -> Rule:
        keys = [k for k in raw if k != "message"]
        unknown = [k for k in keys if k not in CHECKS]
        if unknown:
            key = unknown[0]
            raise self.error(
                f"unknown check '{key}'{did_you_mean(str(key), [*CHECKS, 'message'])}",
                (*path, key),
                hint=f"checks: {', '.join(sorted(CHECKS))}",
            )
        if len(keys) != 1:
            found = " and ".join(f"'{k}'" for k in keys) or "none"
            raise self.error(f"a rule mapping holds exactly one check, found {found}", path)
        name = keys[0]
        check = CHECKS[name]
        args = raw[name]
        errors = sorted(_validator(check).iter_errors(args), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            raise self.error(f"{name}: {first.message}", (*path, name, *first.absolute_path))
        rule = check.compile(args, self, (*path, name))
        if "message" in raw:
            if not isinstance(raw["message"], str):
                raise self.error("message: expected a string", (*path, "message"))
            rule.message = self.value(raw["message"], (*path, "message"))
        return rule


def compile_regex(scope: Scope, text: str, path: Path_) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise scope.error(f"invalid regular expression {show(text)}: {exc}", path) from None


MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": "Reason to report instead of the check's own when the rule fails; may hold "
    "${{ }} expressions.",
}
VALUE_DESCRIPTION = "The value to check: a literal or a ${{ }} expression."
