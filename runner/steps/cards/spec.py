"""Load and validate a card spec (YAML) into a compiled CardSpec.

The spec is checked against ``schemas/card.schema.json`` (the format's single source of truth),
then every expression is compiled once, every name it reads is checked, every pattern compiled,
and every literal checked against its field's declared type. All mistakes are InvalidPipeline
errors at file:line:column.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import InvalidPipeline, Location
from ...expr import Compiled, Expression, compile_value, is_static, iter_expressions
from ...source._fastschema import surely_valid
from ...source.document import Path_
from ...source.document import Sourced as Positioned
from ...source.document import parse_file as _parse_yaml
from ._types import type_problem

if TYPE_CHECKING:
    import jsonschema

# runner/pipeline/schemas links to the top-level schemas/ (the single source), so wheels carry it
# too.
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "pipeline" / "schemas" / "card.schema.json"


# -- the compiled model --------------------------------------------------------------------------


@dataclass(frozen=True)
class ExprCondition:
    """``when: "${{ expr }}"``: the expression must give true or false."""

    expr: Expression


@dataclass(frozen=True)
class MatchCondition:
    """``when: {matches: {value, pattern}}``: the named pattern is found in the text."""

    value: Expression
    pattern_name: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class AllCondition:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyCondition:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class NotCondition:
    part: Condition


Condition = ExprCondition | MatchCondition | AllCondition | AnyCondition | NotCondition


@dataclass(frozen=True)
class Rule:
    """One rule: when ``when`` holds (or always, when None), give ``value`` or raise ``error``."""

    when: Condition | None
    value: Compiled
    error: str | None
    where: Location


@dataclass(frozen=True)
class Item:
    """One element source of an ``items`` list (optionally conditional or repeated)."""

    value: Compiled
    when: Condition | None = None
    for_each: Expression | None = None
    as_name: str = "item"


@dataclass(frozen=True)
class Source:
    """Where a value comes from: exactly one of a value, rules or items."""

    value: Compiled = None
    rules: tuple[Rule, ...] | None = None
    items: tuple[Item, ...] | None = None


@dataclass(frozen=True)
class FieldDef:
    """A declared card field ``group.name`` with its type and source."""

    group: str
    name: str
    type: str
    source: Source
    where: Location
    allowed: tuple[Any, ...] = ()
    nullable: bool = False
    unordered: bool = False
    sort_key: str | None = None

    @property
    def path(self) -> str:
        return f"{self.group}.{self.name}"


@dataclass(frozen=True)
class InputDef:
    name: str
    type: str
    required: bool


@dataclass
class CardSpec:
    """A compiled card spec. Build cards with ``runner.steps.cards.build_card``."""

    path: str
    title: str
    schema_version: int
    key_group: str
    inputs: dict[str, InputDef]
    lets: tuple[tuple[str, Source], ...]
    groups: dict[str, tuple[FieldDef, ...]]  # the key group first, then the fields, in order
    exclude: frozenset[str]
    hash_key: str | None
    digest: str  # sha256 of the spec file's bytes
    unordered: dict[str, str | None] = field(default_factory=dict)
    # The one-template evaluator (runner.steps.cards._fast), made on first build; False: not usable.
    fast: Any = field(default=None, repr=False, compare=False)

    def fields(self) -> Iterator[FieldDef]:
        """Every declared field, key group first, in spec order."""
        for defs in self.groups.values():
            yield from defs

    @property
    def hash_excluded(self) -> frozenset[str]:
        """Top-level keys left out of the hash: ``exclude`` plus the stored hash key."""
        return self.exclude | ({self.hash_key} if self.hash_key else frozenset())


# -- loading -------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return SCHEMA_PATH.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _schema_validator() -> jsonschema.Draft202012Validator:
    import jsonschema  # ~35 ms: only for a spec the fast predicate cannot vouch for

    return jsonschema.Draft202012Validator(json.loads(_schema_text()))


def load_spec(path: str | Path) -> CardSpec:
    """Load a card spec file. Raises InvalidPipeline (file:line:column) when it is not valid."""
    text = str(path if isinstance(path, Path) else Path(path))  # one spelling per file
    try:
        digest = _content_digest(text)
    except FileNotFoundError:
        raise InvalidPipeline(f"no such card spec: {text}") from None
    except OSError as exc:
        raise InvalidPipeline(f"cannot read card spec {text}: {exc.strerror}") from None
    return _load_cached(text, digest)


# A card step loads its spec once per for_each element: the file's digest is kept by its
# (size, mtime, ctime, inode) signature instead of being read and hashed every time.
_DIGESTS: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_RACY_NS = 2_000_000_000


def _content_digest(path: str) -> str:
    st = os.stat(path)
    sig = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    known = _DIGESTS.get(path)
    if known is not None and known[0] == sig:
        return known[1]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    # A file changed within the clock's granularity of now could change again with the same
    # signature: only signatures old enough are trusted (the file is read again until then).
    if time.time_ns() - st.st_mtime_ns > _RACY_NS:
        if len(_DIGESTS) >= 1024:
            _DIGESTS.clear()
        _DIGESTS[path] = (sig, digest)
    return digest


@lru_cache(maxsize=64)
def _load_cached(path: str, digest: str) -> CardSpec:
    # Keyed by content digest: a spec is compiled once per content, and an edit recompiles it.
    doc = parse_file(Path(path))
    return _Compiler(doc, digest).spec()


class _Compiler:
    def __init__(self, doc: Positioned, digest: str) -> None:
        self.doc = doc
        self.digest = digest
        self.patterns: dict[str, re.Pattern[str]] = {}

    def fail(self, message: str, path: Path_, *, key: bool = False) -> InvalidPipeline:
        return InvalidPipeline(message, where=self.doc.where(path, key=key))

    def spec(self) -> CardSpec:
        data = self.doc.data
        if not isinstance(data, dict):
            raise self.fail("a card spec must be a mapping", ())
        self._check_schema(data)
        self._compile_patterns(data.get("patterns", {}))
        inputs = {
            name: InputDef(name, d["type"], d["required"]) for name, d in data["inputs"].items()
        }
        names = set(inputs)
        lets: list[tuple[str, Source]] = []
        for name, d in data.get("let", {}).items():
            if name in names:
                raise self.fail(
                    f"let '{name}' shadows an input of the same name", ("let", name), key=True
                )
            lets.append((name, self._source(d, ("let", name), names, None)))
            names.add(name)
        groups: dict[str, tuple[FieldDef, ...]] = {}
        ((key_group, key_fields),) = data["key"].items()
        groups[key_group] = self._group(key_group, key_fields, ("key", key_group), names)
        for gname, gdef in data["fields"].items():
            if gname in groups or gname in ("schema_version",):
                raise self.fail(
                    f"field group '{gname}' clashes with the key or the envelope",
                    ("fields", gname),
                    key=True,
                )
            groups[gname] = self._group(gname, gdef, ("fields", gname), names)
        exclude = frozenset(data.get("exclude", []))
        hash_key = data.get("hash_key")
        clash = (exclude | ({hash_key} if hash_key else set())) & (set(groups) | {"schema_version"})
        if clash:
            raise self.fail(
                f"cannot exclude declared key(s) {sorted(clash)} from the hash", ("exclude",)
            )
        unordered = {f.path: f.sort_key for defs in groups.values() for f in defs if f.unordered}
        return CardSpec(
            path=self.doc.file,
            title=data["title"],
            schema_version=data["schema_version"],
            key_group=key_group,
            inputs=inputs,
            lets=tuple(lets),
            groups=groups,
            exclude=exclude,
            hash_key=hash_key,
            digest=self.digest,
            unordered=unordered,
        )

    def _check_schema(self, data: dict[str, Any]) -> None:
        if surely_valid(_schema_text(), data):
            return
        import jsonschema

        errors = sorted(_schema_validator().iter_errors(data), key=lambda e: list(e.path))
        if not errors:
            return
        err = jsonschema.exceptions.best_match(errors)
        if err is None:  # pragma: no cover - best_match of a non-empty list is never None
            err = errors[0]
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
            extra = [k for k in err.instance if k not in allowed]
            if extra:
                raise self.fail(f"unknown key '{extra[0]}'", (*path, extra[0]), key=True)
        where = "/".join(str(p) for p in path) or "the spec"
        raise self.fail(f"{where}: {err.message}", path)

    def _compile_patterns(self, pats: Mapping[str, Any]) -> None:
        for name, d in pats.items():
            flags = re.IGNORECASE if d.get("ignore_case") else 0
            try:
                self.patterns[name] = re.compile(d["regex"], flags)
            except re.error as exc:
                raise self.fail(
                    f"pattern '{name}' is not a valid regex: {exc}", ("patterns", name, "regex")
                ) from None

    def _group(
        self, gname: str, gdef: Mapping[str, Any], path: Path_, names: set[str]
    ) -> tuple[FieldDef, ...]:
        out = []
        for fname, d in gdef.items():
            fpath = (*path, fname)
            ftype = d["type"]
            allowed = tuple(d.get("allowed", ()))
            if (ftype == "enum") != bool(allowed):
                raise self.fail("`allowed` is required with type enum, and only with it", fpath)
            unordered = bool(d.get("unordered", False))
            if unordered and ftype != "list":
                raise self.fail("`unordered` applies to lists only", (*fpath, "unordered"))
            if "sort_key" in d and not unordered:
                raise self.fail("`sort_key` needs `unordered: true`", (*fpath, "sort_key"))
            fd = FieldDef(
                group=gname,
                name=fname,
                type=ftype,
                where=self.doc.where(fpath, key=True),
                allowed=allowed,
                nullable=bool(d.get("nullable", False)),
                unordered=unordered,
                sort_key=d.get("sort_key"),
                source=Source(),
            )
            source = self._source(d, fpath, names, fd)
            out.append(FieldDef(**{**fd.__dict__, "source": source}))
        return tuple(out)

    # -- sources, rules, conditions ------------------------------------------------------------

    def _source(
        self, d: Mapping[str, Any], path: Path_, names: set[str], fd: FieldDef | None
    ) -> Source:
        present = [k for k in ("value", "rules", "items") if k in d]
        if len(present) != 1:
            raise self.fail("give exactly one of `value`, `rules`, `items`", path)
        kind = present[0]
        if kind == "value":
            value = self._value(d["value"], (*path, "value"), names)
            self._check_literal(value, fd, (*path, "value"))
            return Source(value=value)
        if kind == "rules":
            return Source(rules=self._rules(d["rules"], (*path, "rules"), names, fd))
        if fd is not None and fd.type != "list":
            raise self.fail(f"`items` builds a list, but the field is declared {fd.type}", path)
        return Source(items=self._items(d["items"], (*path, "items"), names))

    def _value(self, raw: Any, path: Path_, names: set[str]) -> Compiled:
        compiled = compile_value(raw, lambda sub: self.doc.where((*path, *sub)))
        for expr in iter_expressions(compiled):
            self._check_refs(expr, names)
        return compiled

    def _check_refs(self, expr: Expression, names: set[str]) -> None:
        unknown = sorted({r.root for r in expr.refs} - names)
        if unknown:
            raise InvalidPipeline(
                f"'{expr.source}' reads unknown name '{unknown[0]}'",
                where=expr.where,
                hint="declare it under `inputs:` or `let:`",
            )

    def _expression(self, raw: Any, path: Path_, names: set[str]) -> Expression:
        compiled = self._value(raw, path, names)
        if not isinstance(compiled, Expression):
            raise self.fail("expected exactly one `${{ expr }}`", path)
        return compiled

    def _check_literal(self, value: Compiled, fd: FieldDef | None, path: Path_) -> None:
        if fd is None or not is_static(value):
            return
        problem = type_problem(value, fd.type, fd.allowed, fd.nullable)
        if problem:
            raise self.fail(f"{fd.path}: {problem}", path)

    def _rules(
        self, raw: list[Any], path: Path_, names: set[str], fd: FieldDef | None
    ) -> tuple[Rule, ...]:
        rules = []
        for i, r in enumerate(raw):
            rpath = (*path, i)
            if "else" in r:
                if set(r) != {"else"}:
                    raise self.fail("`else` stands alone in its rule", rpath)
                r = {"value": r["else"]}
            if ("value" in r) == ("error" in r):
                raise self.fail("a rule gives exactly one of `value` and `error`", rpath)
            when = self._condition(r["when"], (*rpath, "when"), names) if "when" in r else None
            if when is None and i != len(raw) - 1:
                raise self.fail("a rule without `when` must be the last rule", rpath)
            value = None
            if "value" in r:
                value = self._value(r["value"], (*rpath, "value"), names)
                self._check_literal(value, fd, (*rpath, "value"))
            rules.append(Rule(when, value, r.get("error"), self.doc.where(rpath)))
        return tuple(rules)

    def _items(self, raw: list[Any], path: Path_, names: set[str]) -> tuple[Item, ...]:
        items = []
        for i, it in enumerate(raw):
            ipath = (*path, i)
            if not (isinstance(it, dict) and "value" in it):
                items.append(Item(self._value(it, ipath, names)))
                continue
            if "as" in it and "for_each" not in it:
                raise self.fail("`as` needs `for_each`", (*ipath, "as"))
            as_name = it.get("as", "item")
            for_each = None
            inner = names
            if "for_each" in it:
                for_each = self._expression(it["for_each"], (*ipath, "for_each"), names)
                if as_name in names:
                    raise self.fail(f"`as: {as_name}` shadows a name in scope", ipath)
                inner = names | {as_name}
            when = self._condition(it["when"], (*ipath, "when"), inner) if "when" in it else None
            items.append(
                Item(self._value(it["value"], (*ipath, "value"), inner), when, for_each, as_name)
            )
        return tuple(items)

    def _condition(self, raw: Any, path: Path_, names: set[str]) -> Condition:
        if isinstance(raw, str):
            return ExprCondition(self._expression(raw, path, names))
        ((kind, arg),) = raw.items()
        sub: tuple[Hashable, ...] = (*path, kind)
        if kind == "matches":
            pname = arg["pattern"]
            if pname not in self.patterns:
                raise self.fail(
                    f"unknown pattern '{pname}'",
                    (*sub, "pattern"),
                ) from None
            value = self._expression(arg["value"], (*sub, "value"), names)
            return MatchCondition(value, pname, self.patterns[pname])
        if kind == "not":
            return NotCondition(self._condition(arg, sub, names))
        parts = tuple(self._condition(c, (*sub, i), names) for i, c in enumerate(arg))
        return AllCondition(parts) if kind == "all" else AnyCondition(parts)


def parse_file(path: Path) -> Positioned:
    """A card spec file with positions (the same YAML reader as pipelines: duplicate keys are
    errors, every value keeps its file:line:column)."""
    if not path.is_file():
        raise InvalidPipeline(f"no such card spec: {path}")
    return _parse_yaml(path, str(path))
