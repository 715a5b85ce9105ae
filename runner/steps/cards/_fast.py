"""A faster way to evaluate a whole card: all its expressions in one sandboxed template render.

Evaluating each field's expression on its own costs one Jinja context per expression (~20 µs
each, ~50 per card). Here the spec's lets and fields are translated once into a single template
built from the very same expression sources, whose only effect is to hand values to a collector.
A field whose value is a literal or a plain path (``shot.camera_direction``: a name, then keys;
optionally ``| default(<literal>)``) is not put in the template: it is read in Python, from
dicts only, after the render. For a field given by rules whose values are all of that kind, the
template only decides which rule applies (conditions stay in the sandbox).
Anything unusual (a failure, a refusal, a construct not translated, a path step that is not a
key of a dict) makes the caller fall back to the field-by-field path, which is the reference
semantics and gives the precise error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import nodes

from ...expr import Compiled, Expression, HardenedEnvironment, is_static
from .spec import (
    AllCondition,
    AnyCondition,
    CardSpec,
    Condition,
    ExprCondition,
    MatchCondition,
    NotCondition,
    Source,
)


class Unsupported(Exception):
    """The spec uses something the one-template path does not translate."""


class _Refused(Exception):
    """A rule refused the inputs (the slow path will say which and why)."""


class NotPlainData(Exception):
    """A plain path met something other than a dict holding the key (the sandbox decides)."""


def _fail(_value: Any) -> str:
    raise _Refused()


def _to_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("condition is not true or false")
    return value


def _to_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("for_each is not a list")
    return value


def _add(target: list[Any], value: Any) -> str:
    target.append(value)
    return ""


def _collect(values: list[Any], out: list[Any]) -> str:
    out.extend(values)
    return ""


class FastCard:
    """The one-template translation of a spec; ``run`` returns the field values, in spec order."""

    def __init__(self, spec: CardSpec) -> None:
        self.literals: list[Any] = []
        self.patterns: list[re.Pattern[str]] = []
        self.slot_names: list[str] = []
        names = set(spec.inputs) | {name for name, _ in spec.lets}
        if "loop" in names:
            raise Unsupported("a name Jinja reserves")
        parts: list[str] = []
        self.let_names = [name for name, _ in spec.lets]
        for name, source in spec.lets:
            slot = self._slot(f"let:{name}")
            parts.append(self._source(source, slot))
            parts.append(f"{{% set {name} = S{slot} %}}")
        # Per field, in spec order: read in Python (a getter) or a slot of the template.
        self.plan: list[_Getter | int] = []
        for fd in spec.fields():
            plain = fd.source.rules is None and fd.source.items is None
            getter = _direct(fd.source.value) if plain else None
            if getter is not None:
                self.plan.append(getter)
                continue
            slot = self._slot(fd.path)
            choices = _rule_choices(fd.source)
            if choices is None:
                parts.append(self._source(fd.source, slot))
                self.plan.append(slot)
            else:  # the template only picks the rule; its value is read in Python
                parts.append(self._source(fd.source, slot, by_index=True))
                self.plan.append(_chosen(slot, choices))
        every = ", ".join(f"S{i}" for i in range(len(self.slot_names)))
        parts.append(f"{{% if [{every}] | card_collect(OUT) %}}{{% endif %}}")
        # A private sandbox: the same hardened environment, plus this card's helper filters.
        env = HardenedEnvironment()
        env.filters.update(
            {
                "card_lit": self.literals.__getitem__,
                "card_bool": _to_bool,
                "card_match": self._match,
                "card_list": _to_list,
                "card_add": _add,
                "card_fail": _fail,
                "card_collect": _collect,
            }
        )
        self.template = env.from_string("".join(parts))

    def _match(self, text: Any, index: int) -> bool:
        if not isinstance(text, str):
            raise TypeError("pattern needs text")
        return self.patterns[index].search(text) is not None

    def _slot(self, name: str) -> int:
        self.slot_names.append(name)
        return len(self.slot_names) - 1

    def _lit(self, value: Any) -> str:
        self.literals.append(value)
        return f"({len(self.literals) - 1} | card_lit)"

    def _value(self, compiled: Compiled) -> str:
        if isinstance(compiled, Expression):
            return f"({compiled.source})"
        if is_static(compiled):
            return self._lit(compiled)
        if isinstance(compiled, dict):
            pairs = ", ".join(f"{self._lit(k)}: {self._value(v)}" for k, v in compiled.items())
            return "{" + pairs + "}"
        if isinstance(compiled, list):
            return "[" + ", ".join(self._value(v) for v in compiled) + "]"
        raise Unsupported(type(compiled).__name__)  # an interpolated string

    def _cond(self, cond: Condition) -> str:
        if isinstance(cond, ExprCondition):
            return f"(({cond.expr.source}) | card_bool)"
        if isinstance(cond, MatchCondition):
            self.patterns.append(cond.pattern)
            return f"(({cond.value.source}) | card_match({len(self.patterns) - 1}))"
        if isinstance(cond, NotCondition):
            return f"(not {self._cond(cond.part)})"
        joiner = " and " if isinstance(cond, AllCondition) else " or "
        assert isinstance(cond, (AllCondition, AnyCondition))
        return "(" + joiner.join(self._cond(c) for c in cond.parts) + ")"

    def _source(self, source: Source, slot: int, by_index: bool = False) -> str:
        target = f"S{slot}"
        if source.rules is not None:
            out = []
            for i, rule in enumerate(source.rules):
                value = str(i) if by_index else self._value(rule.value)
                body = _FAIL if rule.error is not None else f"{{% set {target} = {value} %}}"
                if rule.when is None:
                    out.append(("{% else %}" if i else "{% if true %}") + body)
                else:
                    out.append(f"{{% {'elif' if i else 'if'} {self._cond(rule.when)} %}}" + body)
            if source.rules[-1].when is not None:
                out.append("{% else %}" + _FAIL)
            return "".join(out) + "{% endif %}"
        if source.items is not None:
            out = [f"{{% set {target} = [] %}}"]
            for item in source.items:
                add = f"{{% if {target} | card_add({self._value(item.value)}) %}}{{% endif %}}"
                if item.when is not None:
                    add = f"{{% if {self._cond(item.when)} %}}{add}{{% endif %}}"
                if item.for_each is not None:
                    add = (
                        f"{{% for {item.as_name} in (({item.for_each.source}) | card_list) %}}"
                        f"{add}{{% endfor %}}"
                    )
                out.append(add)
            return "".join(out)
        return f"{{% set {target} = {self._value(source.value)} %}}"

    def run(self, ctx: Mapping[str, Any]) -> list[Any]:
        """Every field's value, in spec order; raises on any failure (the caller then takes the
        slow path)."""
        out: list[Any] = []
        # What Template.render does, minus copying the variables and joining an empty output.
        template = self.template
        for _ in template.root_render_func(template.new_context({**ctx, "OUT": out}, shared=True)):
            pass
        scope = {**ctx, **dict(zip(self.let_names, out, strict=False))}  # lets come first
        return [out[p] if isinstance(p, int) else p(scope, out) for p in self.plan]


# Statements, not output: a helper's "" result is never emitted, so never measured.
_FAIL = "{% if none | card_fail %}{% endif %}"

# A value read in Python: from the scope (inputs and lets) and the template's slots.
_Getter = Callable[[Mapping[str, Any], list[Any]], Any]

# Names the sandbox resolves as dict attributes (methods) when they are not keys.
_DICT_NAMES = frozenset(dir(dict))


def _direct(compiled: Compiled) -> _Getter | None:
    """A getter for a value read without the sandbox, or None when the sandbox must evaluate it.

    Read directly: literals; a plain path (a name, then ``.key`` / ``['key']`` steps, as the
    parsed tree says); a plain path ``| default(<literal>)``; dicts and lists made of those.
    """
    if isinstance(compiled, Expression):
        return _direct_expression(compiled.tree)
    if is_static(compiled):
        return lambda _scope, _out: compiled  # copied by canonicalisation: never shared
    if isinstance(compiled, (dict, list)):
        parts = list(compiled.values()) if isinstance(compiled, dict) else compiled
        found = [_direct(v) for v in parts]
        getters = [g for g in found if g is not None]
        if len(getters) != len(found):
            return None
        if isinstance(compiled, list):
            return lambda scope, out: [g(scope, out) for g in getters]
        keys = list(compiled)
        return lambda scope, out: {k: g(scope, out) for k, g in zip(keys, getters, strict=True)}
    return None  # an interpolated string


def _direct_expression(tree: nodes.Node | None) -> _Getter | None:
    path = _plain_path(tree)
    if path is not None:
        root, keys = path
        return lambda scope, _out: _lookup(scope[root], keys)
    if not (
        isinstance(tree, nodes.Filter)
        and tree.name == "default"
        and len(tree.args) == 1
        and isinstance(tree.args[0], nodes.Const)
        and not (tree.kwargs or tree.dyn_args or tree.dyn_kwargs)
    ):
        return None
    path = _plain_path(tree.node)
    if path is None or not path[1]:
        return None
    root, keys = path
    fallback = tree.args[0].value
    return lambda scope, _out: _lookup(scope[root], keys, fallback)


def _rule_choices(source: Source) -> list[_Getter | None] | None:
    """Per rule, its value's getter (None for an error rule), when every value is direct."""
    if source.rules is None:
        return None
    choices: list[_Getter | None] = []
    for rule in source.rules:
        getter = None if rule.error is not None else _direct(rule.value)
        if getter is None and rule.error is None:
            return None
        choices.append(getter)
    return choices


def _chosen(slot: int, choices: list[_Getter | None]) -> _Getter:
    def get(scope: Mapping[str, Any], out: list[Any]) -> Any:
        getter = choices[out[slot]]
        assert getter is not None  # an error rule fails the render: it is never chosen
        return getter(scope, out)

    return get


def _plain_path(tree: nodes.Node | None) -> tuple[str, tuple[str, ...]] | None:
    """(name, keys) of ``name.k1['k2']...``; None for any other tree."""
    keys: list[str] = []
    node = tree
    while True:
        if isinstance(node, nodes.Getattr):
            keys.append(node.attr)
            node = node.node
        elif (
            isinstance(node, nodes.Getitem)
            and isinstance(node.arg, nodes.Const)
            and type(node.arg.value) is str
        ):
            keys.append(node.arg.value)
            node = node.node
        elif isinstance(node, nodes.Name) and node.ctx == "load":
            return node.name, tuple(reversed(keys))
        else:
            return None


_NO_FALLBACK: Any = object()


def _lookup(value: Any, keys: tuple[str, ...], fallback: Any = _NO_FALLBACK) -> Any:
    """The value at ``keys`` (a ``fallback`` given: it, when the last key is absent).

    The sandbox gives a dict's key for both ``.k`` and ``['k']`` when the key is present, and
    an undefined value (which ``default`` replaces) when the last one is absent and names no
    dict method. Anything else (a list or null on the way, a missing key without a fallback...)
    is left to the sandbox, through the slow path.
    """
    last = len(keys) - 1
    for i, key in enumerate(keys):
        if type(value) is not dict:
            raise NotPlainData(key)
        if key not in value:
            if i == last and fallback is not _NO_FALLBACK and key not in _DICT_NAMES:
                return fallback
            raise NotPlainData(key)
        value = value[key]
    return value
