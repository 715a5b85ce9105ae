"""Pipeline file -> validated document with source positions.

Every error names file:line:column, the step id where there is one, and for an unknown key the
nearest valid one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from .errors import InvalidPipeline, Location, UsageError
from .yamlsrc import Sourced, parse_file

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


@cache
def pipeline_schema() -> dict[str, Any]:
    path = SCHEMA_DIR / "pipeline.schema.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@cache
def _pipeline_validator() -> Draft202012Validator:
    return Draft202012Validator(pipeline_schema())


@dataclass
class PipelineDoc:
    """A schema-valid pipeline document and where its parts came from."""

    path: Path
    src: Sourced
    data: dict[str, Any]

    @property
    def directory(self) -> Path:
        return self.path.parent

    def where(self, *path: Any, key: bool = False) -> Location:
        return self.src.where(tuple(path), key=key)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        short = value if len(value) <= 40 else value[:39] + "…"
        return f"string '{short}'"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def is_expression_string(value: Any) -> bool:
    return isinstance(value, str) and value.strip().startswith("${{")


def schema_errors(
    validator: Draft202012Validator,
    instance: Any,
    *,
    where: Any,
    step: str | None = None,
    context: str = "",
    base: tuple[Any, ...] = (),
    tolerate_expressions: bool = False,
) -> list[InvalidPipeline]:
    """Turn jsonschema errors into located InvalidPipeline errors, most specific first.

    ``where(path, key=bool)`` locates a path; with ``tolerate_expressions`` a value that is a
    ``${{ }}`` expression is accepted wherever a schema expects some other type (it is checked
    again after evaluation).
    """
    out: list[InvalidPipeline] = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: (-len(e.path), str(e.path))):
        leaves = [err]
        if err.validator in ("oneOf", "anyOf") and err.context:
            best = max(err.context, key=lambda e: len(e.path))
            leaves = [best]
        for leaf in leaves:
            if tolerate_expressions and is_expression_string(leaf.instance):
                continue
            converted = _convert(leaf, where, step, context, base)
            if converted is not None:
                out.append(converted)
    return out


def _convert(
    err: ValidationError, where: Any, step: str | None, context: str, base: tuple[Any, ...]
) -> InvalidPipeline | None:
    path = (*base, *err.absolute_path)
    label = context + ("." if context and err.absolute_path else "") + ".".join(
        str(p) for p in err.absolute_path
    )
    at = f" in '{label}'" if label else ""
    if err.validator == "additionalProperties":
        allowed = list(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in allowed]
        key = extra[0] if extra else "?"
        hint = did_you_mean(str(key), allowed)
        if not hint and allowed:
            hint = "valid keys: " + ", ".join(sorted(allowed))
        return InvalidPipeline(
            f"unknown key '{key}'{at}", where=where((*path, key), key=True), step=step, hint=hint
        )
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return InvalidPipeline(
            f"missing required key '{missing}'{at}", where=where(path), step=step
        )
    if err.validator == "type":
        expected = err.validator_value
        if isinstance(expected, list):
            expected = " or ".join(expected)
        return InvalidPipeline(
            f"expected {expected}{at}, found {_describe(err.instance)}", where=where(path), step=step
        )
    if err.validator == "propertyNames":
        return None  # reported by the nested pattern error on the name itself
    if err.validator == "pattern" and err.absolute_path == err.path and not err.path:
        pass
    if err.validator == "const":
        return InvalidPipeline(
            f"expected {err.validator_value!r}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
        )
    if err.validator == "enum":
        choices = ", ".join(repr(v) for v in err.validator_value)
        return InvalidPipeline(
            f"expected one of {choices}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
        )
    message = err.message
    if len(message) > 200:
        message = message[:199] + "…"
    return InvalidPipeline(f"{message}{at}", where=where(path), step=step)


def load_document(path: Path) -> PipelineDoc:
    """Read and schema-check a pipeline file. Raises InvalidPipeline."""
    display = _display(path)
    src = parse_file(path, display)
    if not isinstance(src.data, dict):
        raise InvalidPipeline(
            f"a pipeline must be a mapping with runner:, name: and steps:, found {_describe(src.data)}",
            where=Location(display, 1, 1),
        )
    errors = schema_errors(_pipeline_validator(), src.data, where=src.where)
    # A propertyNames failure has no located leaf of its own: name the offending key.
    if not errors:
        return PipelineDoc(path, src, src.data)
    first = errors[0]
    steps = src.data.get("steps")
    where = first.where
    step = None
    if isinstance(steps, dict) and where is not None:
        for sid in steps:
            loc = src.keys.get(("steps", sid))
            if loc and (loc[0] <= where.line):
                step = sid
    if step is not None and first.step is None:
        first.step = step
    raise first


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- params -------------------------------------------------------------------------------------

_JSON_TYPES = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
}


def param_schema(decl: Mapping[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": _JSON_TYPES[decl["type"]]}
    for k in ("enum", "minimum", "maximum", "pattern", "items"):
        if k in decl:
            schema[k] = decl[k]
    return schema


def resolve_params(doc: PipelineDoc, overrides: Mapping[str, str]) -> dict[str, Any]:
    """Declared defaults + `-p key=value` overrides (parsed as YAML), each checked by type.

    Raises UsageError for an unknown or ill-typed override, InvalidPipeline for a bad default.
    """
    decls: dict[str, Any] = doc.data.get("params") or {}
    values: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key not in decls:
            hint = did_you_mean(key, decls) or (
                "declared params: " + ", ".join(sorted(decls)) if decls else "it declares none"
            )
            raise UsageError(f"unknown param '{key}' (-p {key}=...)", hint=hint)
        decl = decls[key]
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        if decl["type"] == "string" and not isinstance(value, str):
            value = raw  # -p title=123 means the text "123" for a string param
        if decl["type"] == "number" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        _check_param(key, value, decl, UsageError, None)
        values[key] = value
    for key, decl in decls.items():
        if key in values:
            continue
        if "default" not in decl:
            raise UsageError(f"param '{key}' is required", hint=f"pass it with -p {key}=VALUE")
        _check_param(key, decl["default"], decl, InvalidPipeline, doc.where("params", key, "default"))
        values[key] = decl["default"]
    return values


def _check_param(
    key: str, value: Any, decl: Mapping[str, Any], exc: type[Exception], where: Location | None
) -> None:
    schema = param_schema(decl)
    try:
        jsonschema.validate(value, schema, cls=Draft202012Validator)
    except ValidationError as err:
        if err.validator == "type":
            msg = f"param '{key}' must be {decl['type']}, found {_describe(value)}"
        else:
            msg = f"param '{key}': {err.message}"
        if exc is InvalidPipeline:
            raise InvalidPipeline(msg, where=where) from None
        raise UsageError(msg) from None
