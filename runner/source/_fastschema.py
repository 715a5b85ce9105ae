"""A fast "is this valid?" for the JSON Schema keywords our schemas use, derived from the schema.

jsonschema builds a validator object per subschema it descends into (~60 µs a pipeline step);
a pipeline of 10,000 steps spent seconds proving itself valid. ``compile_schema`` turns a schema
into plain Python predicates with Draft 2020-12 semantics for a subset of keywords. It decides
only what it is sure of: a schema with any other keyword does not compile, and a value it cannot
judge exactly (a float against an enum, non-string items under uniqueItems) raises ``Unsure``.
Either way the caller asks jsonschema, which also words every error, so the schema stays the
single source of truth and a fast "valid" always agrees with jsonschema.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]


class Unsure(Exception):
    """The fast path cannot decide this value; ask jsonschema."""


class _Unsupported(Exception):
    """The schema uses a keyword the fast path does not implement."""


# Keywords that never change validity (format is an annotation without a format checker).
_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly", "format", "$schema"}
)  # fmt: skip


def compile_schema(schema: Any, *, tolerate_expressions: bool = False) -> Check | None:
    """A predicate deciding validity against ``schema`` (raising Unsure when it cannot), or
    None when the schema uses keywords the fast path does not implement.

    With ``tolerate_expressions``, a ``${{ }}`` string is accepted wherever it stands, whatever
    the schema asks there: what loader.schema_errors does with ``tolerate_expressions`` (it drops
    the errors about such values). Each keyword we implement judges its own value only, so the
    values beneath are tolerated exactly where jsonschema's errors about them would be dropped;
    a oneOf made ambiguous by a tolerated value says invalid, and jsonschema is asked.
    """
    try:
        return _Compiler(schema, tolerate_expressions).compile(schema, root=True)
    except _Unsupported:
        return None


def is_expression_string(value: Any) -> bool:
    """A value that is a ``${{ }}`` expression (checked again once evaluated)."""
    return isinstance(value, str) and value.strip().startswith("${{")


def _tolerant(check: Check) -> Check:
    def tolerant(v: Any) -> bool:
        # is_expression_string, inlined: a plain string (most values) costs one search
        if isinstance(v, str) and "${{" in v and v.strip().startswith("${{"):
            return True
        return check(v)

    return tolerant


def _any_string(schema: Any) -> bool:
    """The schema accepts every string and nothing but its type is checked (the most common
    leaf: ``{"type": "string", "description": ...}``)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind != "string" and not (isinstance(kind, list) and "string" in kind):
        return False
    return all(k == "type" or k in _ANNOTATIONS for k in schema)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, numbers.Number):
        raise Unsure
    return False


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, numbers.Number):
        raise Unsure
    return False


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    "integer": _is_integer,
}


# The types that are exactly a Python class (a bool is no integer, so those two are not).
_CLASSES: dict[str, type] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _all_of(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def check(v: Any) -> bool:
        for c in checks:  # noqa: SIM110 - a loop: all(genexpr) costs a generator per call
            if not c(v):
                return False
        return True

    return check


def _equal(one: Any, two: Any) -> bool:
    """jsonschema's equality for scalars (True is not 1, 1 is 1.0); containers are Unsure."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, (list, dict, tuple)) or isinstance(two, (list, dict, tuple)):
        raise Unsure
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    if one is None or two is None:
        return one is two
    if not (_is_number(one) and _is_number(two)):
        raise Unsure
    return bool(one == two)


_OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})


class _Compiler:
    def __init__(self, root: Any, tolerate_expressions: bool = False) -> None:
        self.root = root
        self.refs: dict[str, list[Check]] = {}
        self.tolerate = tolerate_expressions

    def compile(self, schema: Any, *, root: bool = False) -> Check:
        check = self._compile(schema, root=root)
        if not self.tolerate or _any_string(schema):
            return check  # an expression is a string: accepted here whether tolerated or not
        return _tolerant(check)

    def _compile(self, schema: Any, *, root: bool = False) -> Check:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise _Unsupported
        fused = self._fused(schema, root)
        if fused is not None:
            return fused
        checks: list[Check] = []
        for key, arg in schema.items():
            if key in _ANNOTATIONS or key == "$defs" or (root and key == "$id"):
                continue
            if key == "additionalProperties":
                continue  # with properties, below
            builder = getattr(self, "_kw_" + key.lstrip("$"), None)
            if builder is None:
                raise _Unsupported(key)
            checks.append(builder(arg, schema))
        if "additionalProperties" in schema:
            checks.append(self._additional(schema))
        if not checks:
            return lambda v: True
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    # -- the common shapes, in one function each ------------------------------------------------

    def _fused(self, schema: dict[str, Any], root: bool) -> Check | None:
        """An object of known properties, or an array of one kind of item (most of a pipeline's
        values), checked by one function instead of one per keyword: the same verdict, since a
        value passes only when every keyword passes (a keyword that raised Unsure before may
        now meet a failing one first, or after: either way jsonschema is asked)."""
        keys = {k for k in schema if k not in _ANNOTATIONS and not (root and k in ("$id", "$defs"))}
        kind = schema.get("type")
        if kind == "array" and keys == {"type", "items"} and "prefixItems" not in schema:
            item = self.compile(schema["items"])

            def array(v: Any) -> bool:
                if not isinstance(v, list):
                    return False
                for x in v:  # noqa: SIM110 - a loop: all(genexpr) costs a generator per call
                    if not item(x):
                        return False
                return True

            return array
        if kind != "object" or not keys <= _OBJECT_KEYWORDS:
            return None
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra_schema = schema.get("additionalProperties", True)
        if not isinstance(props, dict) or not isinstance(required, list):
            return None
        if not all(isinstance(n, str) for n in required):
            return None
        checks = {name: self.compile(sub) for name, sub in props.items()}
        wanted = frozenset(required)
        closed = extra_schema is False
        extra = None if extra_schema is True or closed else self.compile(extra_schema)

        def mapping(v: Any) -> bool:
            if not isinstance(v, dict) or not wanted <= v.keys():
                return False
            for name, value in v.items():
                c = checks.get(name)
                if c is None:
                    if closed or (extra is not None and not extra(value)):
                        return False
                elif not c(value):
                    return False
            return True

        return mapping

    # -- references -----------------------------------------------------------------------------

    def _kw_ref(self, ref: Any, schema: Any) -> Check:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _Unsupported(ref)
        cell = self.refs.get(ref)
        if cell is None:
            cell = self.refs[ref] = []  # filled after, so recursive schemas terminate
            target: Any = self.root
            for part in ref[1:].split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise _Unsupported(ref)
                target = target[part]
            cell.append(self.compile(target))
        return lambda v: cell[0](v)

    # -- any type -------------------------------------------------------------------------------

    def _kw_type(self, kind: Any, schema: Any) -> Check:
        kinds = [kind] if isinstance(kind, str) else kind
        if not isinstance(kinds, list) or any(k not in _TYPES for k in kinds):
            raise _Unsupported(kind)
        tests = [_TYPES[k] for k in kinds]
        if len(tests) == 1:
            return tests[0]
        if not {"number", "integer"} & set(kinds):  # e.g. a rule: one isinstance, no generator
            classes = tuple(_CLASSES[k] for k in kinds)
            return lambda v: isinstance(v, classes)
        return lambda v: any(t(v) for t in tests)

    def _kw_const(self, const: Any, schema: Any) -> Check:
        return lambda v: _equal(v, const)

    def _kw_enum(self, enum: Any, schema: Any) -> Check:
        if not isinstance(enum, list):
            raise _Unsupported("enum")
        strings = frozenset(e for e in enum if isinstance(e, str))
        others = [e for e in enum if not isinstance(e, str)]

        def check(v: Any) -> bool:
            if isinstance(v, str):
                return v in strings
            return any(_equal(v, e) for e in others)

        return check

    # Methods are named _kw_<keyword> (camelCase as in the spec) and found by name.
    def _kw_anyOf(self, subs: Any, schema: Any) -> Check:
        checks = [self.compile(s) for s in subs]
        return lambda v: any(c(v) for c in checks)

    def _kw_allOf(self, subs: Any, schema: Any) -> Check:
        return _all_of([self.compile(s) for s in subs])

    def _kw_not(self, sub: Any, schema: Any) -> Check:
        check = self.compile(sub)
        return lambda v: not check(v)

    def _kw_oneOf(self, subs: Any, schema: Any) -> Check:
        checks = [self.compile(s) for s in subs]
        return lambda v: sum(1 for c in checks if c(v)) == 1

    # -- numbers and strings --------------------------------------------------------------------

    def _bound(self, limit: Any, ok: Callable[[Any, Any], bool]) -> Check:
        if not _is_number(limit):
            raise _Unsupported("bound")
        return lambda v: not _is_number(v) or ok(v, limit)

    def _kw_minimum(self, limit: Any, schema: Any) -> Check:
        return self._bound(limit, lambda v, m: v >= m)

    def _kw_maximum(self, limit: Any, schema: Any) -> Check:
        return self._bound(limit, lambda v, m: v <= m)

    def _kw_exclusiveMinimum(self, limit: Any, schema: Any) -> Check:
        return self._bound(limit, lambda v, m: v > m)

    def _kw_exclusiveMaximum(self, limit: Any, schema: Any) -> Check:
        return self._bound(limit, lambda v, m: v < m)

    def _kw_pattern(self, pattern: Any, schema: Any) -> Check:
        regex = re.compile(pattern)
        return lambda v: not isinstance(v, str) or regex.search(v) is not None

    def _kw_minLength(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, str) or len(v) >= n

    def _kw_maxLength(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, str) or len(v) <= n

    # -- arrays ---------------------------------------------------------------------------------

    def _kw_items(self, sub: Any, schema: Any) -> Check:
        if "prefixItems" in schema:
            raise _Unsupported("prefixItems")
        check = self.compile(sub)

        def items(v: Any) -> bool:
            if isinstance(v, list):
                for x in v:  # a loop: all(genexpr) costs a generator per call
                    if not check(x):
                        return False
            return True

        return items

    def _kw_minItems(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, list) or len(v) >= n

    def _kw_maxItems(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, list) or len(v) <= n

    def _kw_uniqueItems(self, unique: Any, schema: Any) -> Check:
        if not unique:
            return lambda v: True

        def check(v: Any) -> bool:
            if not isinstance(v, list):
                return True
            if len(v) < 2:
                return True
            for x in v:
                if not isinstance(x, str):
                    raise Unsure
            return len(set(v)) == len(v)

        return check

    # -- objects --------------------------------------------------------------------------------

    def _kw_properties(self, props: Any, schema: Any) -> Check:
        checks = {name: self.compile(sub) for name, sub in props.items()}

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for name, value in v.items():  # loops, not all(genexpr): this is the hot path
                c = checks.get(name)
                if c is not None and not c(value):
                    return False
            return True

        return check

    def _additional(self, schema: Mapping[str, Any]) -> Check:
        if "patternProperties" in schema:
            raise _Unsupported("patternProperties")
        known = frozenset(schema.get("properties") or ())
        sub = schema["additionalProperties"]
        if sub is False:
            return lambda v: not isinstance(v, dict) or known.issuperset(v)
        check = self.compile(sub)
        return lambda v: (
            not isinstance(v, dict) or all(check(x) for k, x in v.items() if k not in known)
        )

    def _kw_required(self, names: Any, schema: Any) -> Check:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Unsupported("required")
        wanted = frozenset(names)
        return lambda v: not isinstance(v, dict) or wanted <= v.keys()

    def _kw_minProperties(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, dict) or len(v) >= n

    def _kw_maxProperties(self, n: Any, schema: Any) -> Check:
        return lambda v: not isinstance(v, dict) or len(v) <= n

    def _kw_propertyNames(self, sub: Any, schema: Any) -> Check:
        check = self.compile(sub)
        return lambda v: not isinstance(v, dict) or all(check(k) for k in v)


_FAST: dict[tuple[str, bool], Check | None] = {}


def surely_valid(schema_json: str, instance: Any, *, tolerate_expressions: bool = False) -> bool:
    """True when the schema (given as its JSON text) certainly accepts ``instance``, decided by
    a predicate compiled from it (see above); False means: ask jsonschema. With
    ``tolerate_expressions``, as schema_errors with it: a ``${{ }}`` value is accepted anywhere."""
    key = (schema_json, tolerate_expressions)
    check = _FAST.get(key, _UNSEEN)
    if check is _UNSEEN:
        check = _FAST[key] = compile_schema(
            json.loads(schema_json), tolerate_expressions=tolerate_expressions
        )
    if check is None:
        return False
    try:
        return bool(check(instance))
    except (Unsure, RecursionError):
        return False


_UNSEEN: Any = object()
