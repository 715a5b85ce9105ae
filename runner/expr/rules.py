"""Lua-free rules: compile a rule from YAML, evaluate it, lint a pipeline's rules.

A rule is an expression string (``"${{ params.n > 3 }}"`` or ``"params.n > 3"``), a mapping with
one named check (``{choice_in: {value: ..., choices: [...]}}``, ``{all: [...]}``, ...), a list
(every rule must pass) or ``true``/``false``. Checks live in ``runner/expr/checks/``, one module
each.
Everything (expressions, regexes, schemas, named rules) is compiled by ``compile_rule``; a
mistake raises RuleError/ExpressionError with its file:line:column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Location
from .checks import CHECKS, Rule, Scope, Verdict, register_check
from .checks.base import MESSAGE_SCHEMA, CheckType, Path_

if TYPE_CHECKING:
    from jinja2 import nodes

    from .checks.collection_has import CollectionQuery

__all__ = [
    "CheckType",
    "CollectionQuery",
    "LintWarning",
    "Rule",
    "RuleBook",
    "StepRules",
    "Verdict",
    "compile_rule",
    "lint_rules",
    "register_check",
    "rule_schema",
]


def compile_rule(
    raw: Any,
    *,
    where_of: Callable[[Path_], Location | None],
    patterns: Mapping[str, str],
    named: Mapping[str, Any],
    root: Path,
    path: Path_ = (),
) -> Rule:
    """Compile one rule. ``where_of`` maps a document path to its location; ``path`` is where
    ``raw`` sits in the document (e.g. ``("steps", "draft", "check")``); named rules are at
    ``("rules", name)`` and patterns at ``("patterns", name)``.

    Raises RuleError (unknown check/pattern/rule, bad regex or schema, malformed rule) or
    ExpressionError (an expression that does not parse), each located.
    """
    return Scope(where_of, patterns, named, root).compile(raw, path)


def __getattr__(name: str) -> Any:
    if name == "CollectionQuery":  # (its module is imported when a collection_has is used)
        from .checks.collection_has import CollectionQuery

        return CollectionQuery
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class RuleBook:
    """A pipeline's rules compiled together: patterns and named rules compiled once, shared by
    every step, and the data ``lint_rules`` needs collected on the way."""

    where_of: Callable[[Path_], Location | None]
    patterns: Mapping[str, str]
    named: Mapping[str, Any]
    root: Path
    steps: dict[str, StepRules] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._scope = Scope(self.where_of, self.patterns, self.named, self.root)
        for name in self.patterns:  # a bad pattern is an error even when no rule uses it
            self._scope.regex(name, ("patterns", name))
        self.named_rules = {n: self._scope.named_rule(n, ("rules", n)) for n in self.named}

    def compile(self, raw: Any, path: Path_) -> Rule:
        """Compile a rule at ``path`` (see compile_rule)."""
        return self._scope.compile(raw, path)

    def add_step(self, step_id: str, *, when: Any = None, check: Any = None) -> StepRules:
        """Compile a step's ``when`` and ``check`` (a rule or a list of rules) and remember
        them for linting."""
        base: Path_ = ("steps", step_id)
        scope = self._scope
        when_rule = None if when is None else scope.compile(when, ("steps", step_id, "when"))
        checks: tuple[Rule, ...] = ()
        if isinstance(check, list):
            checks = tuple(scope.compile(r, (*base, "check", i)) for i, r in enumerate(check))
        elif check is not None:
            checks = (scope.compile(check, (*base, "check")),)
        entry = StepRules(when_rule, checks, self.where_of(base))
        self.steps[step_id] = entry
        return entry

    def lint(self, param_types: Mapping[str, str] | None = None) -> list[LintWarning]:
        return lint_rules(
            steps=self.steps,
            named=self.named_rules,
            patterns_declared={n: self.where_of(("patterns", n)) for n in self.patterns},
            param_types=param_types or {},
        )


# -- schema ---------------------------------------------------------------------------------------


def rule_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of the rule syntax, built from the registered checks.

    ``schemas/rules.schema.json`` is this document; the pipeline schema refers to
    ``rules.schema.json#/$defs/rule``, ``#/$defs/check``, ``#/$defs/rules`` and
    ``#/$defs/patterns``.
    """
    defs: dict[str, Any] = {
        "rule": {
            "description": "A rule: an expression string, true/false, a list (all must pass) "
            "or a mapping with exactly one named check (and an optional `message`).",
            "anyOf": [
                {
                    "type": "string",
                    "minLength": 1,
                    "description": "A sandboxed expression, bare or as one ${{ }}; truthy passes.",
                },
                {"type": "boolean", "description": "A constant rule."},
                {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": "#/$defs/rule"},
                    "description": "Every rule in the list must pass (same as `all`).",
                },
                *({"$ref": f"#/$defs/check_{name}"} for name in sorted(CHECKS)),
            ],
        },
        "check": {
            "description": "A step's `check:`: one rule or a list of rules the output must "
            "satisfy; a failure is fed back to the next attempt.",
            "$ref": "#/$defs/rule",
        },
        "rules": {
            "type": "object",
            "description": "Named rule sets, used as `{rule: <name>}`.",
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_-]*$"},
            "additionalProperties": {"$ref": "#/$defs/rule"},
        },
        "patterns": {
            "type": "object",
            "description": "Named regular expressions, each defined once, used as "
            "`{matches: {pattern_name: <name>}}`.",
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_-]*$"},
            "additionalProperties": {
                "type": "string",
                "description": "A Python regular expression.",
            },
        },
    }
    for name, check in sorted(CHECKS.items()):
        defs[f"check_{name}"] = {
            "type": "object",
            "description": check.description,
            "required": [name],
            "properties": {
                name: {"description": check.description, **check.schema},
                "message": MESSAGE_SCHEMA,
            },
            "additionalProperties": False,
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "rules.schema.json",
        "title": "runner rules",
        "description": "The rule syntax of runner pipelines (`when`, `check`, `rules`, "
        "`patterns`).",
        "$ref": "#/$defs/rule",
        "$defs": defs,
    }


def rule_schema_text() -> str:
    return json.dumps(rule_schema(), indent=2, ensure_ascii=False) + "\n"


# -- lint -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRules:
    """The compiled rules of one step."""

    when: Rule | None = None
    checks: tuple[Rule, ...] = ()
    where: Location | None = None


@dataclass(frozen=True)
class LintWarning:
    """A warning about a pipeline's rules, with its code and where it applies."""

    code: str  # unused-pattern, unused-rule, never-true, always-true, type-error, skipped-ref,
    # raw-shell
    message: str
    where: Location | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


_TYPE_OF_CONST: dict[type, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}
_COMPATIBLE = {
    "string": {"string"},
    "integer": {"integer", "number"},
    "number": {"integer", "number"},
    "boolean": {"boolean"},
}


def lint_rules(
    *,
    steps: Mapping[str, StepRules],
    named: Mapping[str, Rule],
    patterns_declared: Mapping[str, Location | None],
    param_types: Mapping[str, str],
) -> list[LintWarning]:
    """Warnings about a pipeline's compiled rules (a pure function of its arguments).

    ``steps``: step id -> its compiled when/check rules; ``named``: the compiled ``rules:``;
    ``patterns_declared``: pattern name -> where declared; ``param_types``: param name -> its
    declared JSON type (string, integer, number, boolean, ...). Reports unused patterns and
    named rules, comparisons of a typed param with a literal of another type, and a ``when``
    that reads a step which has a ``when`` of its own (it may be skipped).
    """
    warnings: list[LintWarning] = []
    step_rules = [r for s in steps.values() for r in (s.when, *s.checks) if r is not None]
    rules_used = frozenset().union(*(r.rules_used for r in step_rules))
    for name, rule in named.items():
        if name not in rules_used:
            warnings.append(LintWarning("unused-rule", f"rule '{name}' is never used", rule.where))
    patterns_used = frozenset().union(*(r.patterns_used for r in (*step_rules, *named.values())))
    for name, where in patterns_declared.items():
        if name not in patterns_used:
            warnings.append(LintWarning("unused-pattern", f"pattern '{name}' is never used", where))
    seen: set[int] = set()
    for rule in (*step_rules, *named.values()):
        for expression in rule.expressions():
            if id(expression) in seen or expression.tree is None:
                continue
            seen.add(id(expression))
            warnings.extend(
                _type_warnings(expression.tree, expression.source, expression.where, param_types)
            )
    for step_id, entry in steps.items():
        if entry.when is None:
            continue
        for ref in sorted(entry.when.refs, key=lambda r: str(r.attr)):
            other = steps.get(ref.attr or "") if ref.root == "steps" else None
            if other is not None and other.when is not None and ref.attr != step_id:
                warnings.append(
                    LintWarning(
                        "skipped-ref",
                        f"step '{step_id}': `when` reads steps.{ref.attr}, which has a `when` of "
                        f"its own; when '{ref.attr}' is skipped its output is undefined and this "
                        f"condition fails",
                        entry.when.where or entry.where,
                    )
                )
    for rule in (*step_rules, *named.values()):
        warnings.extend(_raw_shell(rule))
    return warnings


def _raw_shell(rule: Rule) -> Iterator[LintWarning]:
    """An ``exec`` rule pasting ``${{ }}`` values into its command as shell text."""
    if getattr(rule, "raw_shell", False):
        yield LintWarning(
            "raw-shell", "exec check pastes ${{ }} values into its command unquoted", rule.where
        )
    for child in rule.children():
        yield from _raw_shell(child)


# Arithmetic bash evaluates a variable's value in as an expression, recursively: a subscript in
# it (`a[$(cmd)]`) runs cmd. A ${{ }} value (by environment, or through a variable the command
# sets from one) reaching it is evaluated, not just read.
_BASH_ARITH = re.compile(r"\$\(\(|\(\(|\$\[|\blet\s|-(?:eq|ne|lt|le|gt|ge)\b")


def raw_shell_steps(steps: Mapping[str, Any]) -> list[LintWarning]:
    """Steps (compiled, by id) whose ``with: {raw: true}`` pastes values as shell text, and
    commands (a shell step's ``run``, its ``exec`` checks) that do arithmetic where values
    stand: under bash (macOS's /bin/sh, a `bash -c`) arithmetic evaluates a value as code."""
    found: list[LintWarning] = []
    for sid, step in steps.items():
        if not isinstance(step.args, dict):
            continue
        runs = [step.args.get("run")] if step.uses == "shell" else []
        if step.uses == "shell" and step.args.get("raw") is True:
            found.append(
                LintWarning(
                    "raw-shell",
                    f"step '{sid}' pastes ${{{{ }}}} values into its command unquoted (raw: true)",
                    step.where,
                )
            )
        for rule in [step.when, *getattr(step, "checks", ())]:
            runs += _exec_runs(rule)
        for run in map(_command_text, runs):
            if "${{" in run and _BASH_ARITH.search(run):
                found.append(
                    LintWarning(
                        "shell-arithmetic",
                        f"step '{sid}' does arithmetic in a command holding ${{{{ }}}} values: "
                        "bash evaluates a variable's value there as an expression (a[$(cmd)] "
                        'runs cmd); check a value is a number first ([ "$x" -eq "$x" ] in '
                        "sh) or keep it out of the arithmetic",
                        step.where,
                    )
                )
                break
    return found


def _command_text(run: Any) -> str:
    """A command as written, from its text or its compiled form (each value as ``${{ }}``)."""
    from .values import Interpolation

    if isinstance(run, Interpolation):
        return "".join(p if isinstance(p, str) else "${{ }}" for p in run.parts)
    return run if isinstance(run, str) else ""


def _exec_runs(rule: Any) -> list[Any]:
    """The ``run`` texts, as written, of the ``exec`` checks in ``rule`` (None: no rule)."""
    if rule is None:
        return []
    own = [rule.raw.get("run")] if rule.kind == "exec" and isinstance(rule.raw, dict) else []
    return own + [r for child in rule.children() for r in _exec_runs(child)]


# The lint reads Jinja's trees (`runner check`): jinja2 is imported there, not by every apply
# that compiles a rule (a plain rule is evaluated without it: plain.py).


def _param_of(node: nodes.Node) -> str | None:
    from jinja2 import nodes

    if (
        isinstance(node, nodes.Getattr)
        and isinstance(node.node, nodes.Name)
        and node.node.name == "params"
    ):
        return node.attr
    return None


def _const_types(node: nodes.Node) -> set[str] | None:
    from jinja2 import nodes

    if isinstance(node, nodes.Const):
        kind = _TYPE_OF_CONST.get(type(node.value))
        return {kind} if kind else None
    if isinstance(node, (nodes.List, nodes.Tuple)) and all(
        isinstance(i, nodes.Const) for i in node.items
    ):
        kinds = {_TYPE_OF_CONST.get(type(i.value)) for i in node.items}  # type: ignore[attr-defined]
        return None if None in kinds else {k for k in kinds if k}
    return None


def _type_warnings(
    tree: nodes.Node, source: str, where: Location | None, param_types: Mapping[str, str]
) -> Iterable[LintWarning]:
    from jinja2 import nodes

    roots = [tree] if isinstance(tree, nodes.Compare) else []  # find_all skips the node itself
    for compare in (*roots, *tree.find_all(nodes.Compare)):
        left = compare.expr
        for operand in compare.ops:
            right = operand.expr
            for param_side, other, flipped in ((left, right, False), (right, left, True)):
                param = _param_of(param_side)
                declared = param_types.get(param or "")
                if declared not in _COMPATIBLE:
                    continue
                op = operand.op
                literal = _const_types(other)
                if literal is None or (
                    op in ("in", "notin")
                    and flipped is False
                    and not isinstance(other, (nodes.List, nodes.Tuple))
                ):
                    continue
                if op in ("in", "notin") and flipped:
                    continue  # `'x' in params.s`: substring tests are fine
                if literal & _COMPATIBLE[declared]:
                    continue
                shown = "/".join(sorted(literal))
                if op in ("eq", "in"):
                    code, what = "never-true", "can never be true"
                elif op in ("ne", "notin"):
                    code, what = "always-true", "is always true"
                else:
                    code, what = "type-error", "fails at run time (incomparable types)"
                yield LintWarning(
                    code,
                    f"`{source}` {what}: params.{param} is declared "
                    f"{declared} and is compared with a {shown} literal",
                    where,
                )
            left = right
