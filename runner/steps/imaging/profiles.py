"""Compliance profiles: a target size, a byte limit, allowed formats and rules, stored as YAML.

A profile is data (``runner/steps/imaging/data/profiles/<name>.yaml``, or any YAML file a
pipeline names), so a
new target (Shorts, a square feed image) is a new file, not new code. Each rule is a runner
expression over the measured values of an image (``width``, ``height``, ``aspect``, ``bytes``,
``format``), compiled once when the profile is loaded.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ExpressionError, InvalidPipeline, Location
from ...expr import Expression, compile_expression
from ...source.beneath import read_beneath
from ...source.datafiles import load_yaml
from ...source.paths import inside
from ...state.canonical import digest

MEASURED_NAMES = frozenset({"width", "height", "aspect", "bytes", "format"})
FORMATS = frozenset({"jpg", "png", "gif", "webp"})

_PROFILE_KEYS = {"name", "description", "width", "height", "max_bytes", "formats", "rules"}
_PROFILE_REQUIRED = _PROFILE_KEYS - {"description"}
_RULE_KEYS = {"name", "expr", "expect", "value", "fail"}
_RULE_REQUIRED = {"name", "expr", "expect"}


@dataclass(frozen=True)
class Rule:
    """One named check: ``expr`` must be true; ``value`` is what the report shows as measured.

    ``expect`` is the human text of what is expected; ``fail`` is appended to the measured value
    in a failure reason ("bytes 2200000 >= limit 2097152").
    """

    name: str
    expr: Expression
    value: Expression
    expect: str
    fail: str


@dataclass(frozen=True)
class Profile:
    """A compliance target: what ``finalize`` aims at and what ``compliance.check`` verifies."""

    name: str
    description: str
    width: int
    height: int
    max_bytes: int  # files must be strictly smaller than this
    formats: tuple[str, ...]  # file-type names: jpg, png, gif, webp
    rules: tuple[Rule, ...]
    source: str  # "packaged:<name>" or the file path it came from
    digest: str  # sha256 of the canonical profile document; part of a step's cache key

    @property
    def aspect(self) -> float:
        return self.width / self.height

    def allows(self, file_type: str) -> bool:
        return file_type in self.formats


def known_profiles() -> list[str]:
    """Names of the packaged profiles, sorted."""
    folder = importlib.resources.files("runner.steps.imaging") / "data" / "profiles"
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in folder.iterdir()
        if entry.is_file() and entry.name.endswith(".yaml")
    )


def is_path_reference(ref: str | os.PathLike[str]) -> bool:
    """True when ``ref`` names a file rather than a packaged profile."""
    if isinstance(ref, os.PathLike):
        return True
    return ref.endswith((".yaml", ".yml")) or "/" in ref or os.sep in ref


def load_profile(ref: str | os.PathLike[str], *, root: Path | None = None) -> Profile:
    """Load a packaged profile by name, or a profile YAML file by path.

    A relative path is resolved inside ``root`` when one is given (a pipeline's root), so a
    pipeline cannot name a file outside it. Raises InvalidPipeline for an unknown name (the
    message lists the known ones), a missing or unreadable file, or a malformed profile
    (unknown keys, wrong types, a rule expression that does not compile or reads an unknown name).
    """
    if not is_path_reference(ref):
        name = str(ref)
        names = known_profiles()
        if name not in names:
            raise InvalidPipeline(
                f"unknown compliance profile '{name}' (known: {', '.join(names)})",
                hint="use one of the known names, or a path to a profile .yaml file",
            )
        profiles = importlib.resources.files("runner.steps.imaging") / "data" / "profiles"
        resource = profiles / f"{name}.yaml"
        return _parse(resource.read_text(encoding="utf-8"), f"packaged:{name}")
    path = Path(ref)
    try:
        if root is not None and not path.is_absolute():
            rel, path = path.as_posix(), inside(root, path)
            # as opened now: an earlier step may have swapped a directory on its path
            text = read_beneath(root, rel).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidPipeline(
            f"cannot read compliance profile {path}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidPipeline(f"compliance profile {path} is not UTF-8 text") from None
    return _parse(text, str(path))


@functools.lru_cache(maxsize=64)
def _parse(text: str, source: str) -> Profile:
    # Keyed by the text itself, so an edited file is re-read and an unchanged one never recompiles.
    where = Location(source)
    try:
        doc = load_yaml(text, source)
    except InvalidPipeline as exc:
        raise InvalidPipeline(
            f"compliance profile is not valid: {exc.message}", where=exc.where, hint=exc.hint
        ) from None
    if not isinstance(doc, dict):
        raise InvalidPipeline("a compliance profile must be a mapping", where=where)
    _check_keys(doc, _PROFILE_KEYS, _PROFILE_REQUIRED, "compliance profile", where)
    name = _typed(doc, "name", str, where)
    width = _positive_int(doc, "width", where)
    height = _positive_int(doc, "height", where)
    max_bytes = _positive_int(doc, "max_bytes", where)
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise InvalidPipeline("profile 'description' must be a string", where=where)
    formats = doc["formats"]
    if not isinstance(formats, list) or not formats or any(f not in FORMATS for f in formats):
        raise InvalidPipeline(
            f"profile 'formats' must be a non-empty list of {', '.join(sorted(FORMATS))}",
            where=where,
        )
    raw_rules = doc["rules"]
    if not isinstance(raw_rules, list) or not raw_rules:
        raise InvalidPipeline("profile 'rules' must be a non-empty list", where=where)
    rules = tuple(_rule(r, i, where) for i, r in enumerate(raw_rules))
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise InvalidPipeline(f"profile rule '{rule.name}' is defined twice", where=where)
        seen.add(rule.name)
    return Profile(
        name=name,
        description=description,
        width=width,
        height=height,
        max_bytes=max_bytes,
        formats=tuple(formats),
        rules=rules,
        source=source,
        digest=digest(doc),
    )


def _rule(raw: Any, index: int, where: Location) -> Rule:
    label = f"profile rule #{index + 1}"
    if not isinstance(raw, dict):
        raise InvalidPipeline(f"{label} must be a mapping", where=where)
    _check_keys(raw, _RULE_KEYS, _RULE_REQUIRED, label, where)
    name = _typed(raw, "name", str, where)
    label = f"profile rule '{name}'"
    expr_src = raw["expr"]
    if isinstance(expr_src, bool):
        expr_src = "true" if expr_src else "false"
    if not isinstance(expr_src, str):
        raise InvalidPipeline(f"{label}: 'expr' must be an expression string", where=where)
    value_src = raw.get("value", name)
    if not isinstance(value_src, str):
        raise InvalidPipeline(f"{label}: 'value' must be an expression string", where=where)
    expect = raw["expect"]
    fail = raw.get("fail", f"(expected {expect})")
    if not isinstance(expect, (str, int, float)) or not isinstance(fail, (str, int, float)):
        raise InvalidPipeline(f"{label}: 'expect' and 'fail' must be text", where=where)
    return Rule(
        name=name,
        expr=_compile(expr_src, label, "expr", where),
        value=_compile(value_src, label, "value", where),
        expect=str(expect),
        fail=str(fail),
    )


def _compile(source: str, label: str, key: str, where: Location) -> Expression:
    try:
        compiled = compile_expression(source, where)
    except ExpressionError as exc:
        raise InvalidPipeline(f"{label}: '{key}': {exc.message}", where=where) from None
    unknown = sorted({ref.root for ref in compiled.refs} - MEASURED_NAMES)
    if unknown:
        raise InvalidPipeline(
            f"{label}: '{key}' reads unknown name(s) {', '.join(unknown)}",
            where=where,
            hint=f"rules can read {', '.join(sorted(MEASURED_NAMES))}",
        )
    return compiled


def _check_keys(
    doc: Mapping[str, Any], allowed: set[str], required: set[str], label: str, where: Location
) -> None:
    unknown = sorted(set(map(str, doc)) - allowed)
    if unknown:
        raise InvalidPipeline(
            f"{label}: unknown key(s) {', '.join(unknown)}",
            where=where,
            hint=f"allowed keys: {', '.join(sorted(allowed))}",
        )
    missing = sorted(required - set(doc))
    if missing:
        raise InvalidPipeline(f"{label}: missing key(s) {', '.join(missing)}", where=where)


def _typed(doc: Mapping[str, Any], key: str, kind: type[str], where: Location) -> str:
    value = doc[key]
    if not isinstance(value, kind) or not value:
        raise InvalidPipeline(f"'{key}' must be a non-empty string", where=where)
    return value


def _positive_int(doc: Mapping[str, Any], key: str, where: Location) -> int:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidPipeline(f"profile '{key}' must be a positive integer", where=where)
    return value
