"""Pipeline file -> validated document with source positions.

Every error names file:line:column, the step id where there is one, and for an unknown key the
nearest valid one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidPipeline, Location, UsageError
from ..source._fastschema import is_expression_string, surely_valid
from ..source.document import Sourced, load_data, parse_file
from ..state.canonical import loads_strict

if TYPE_CHECKING:  # jsonschema loads on first need: a valid pipeline never needs it
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

# runner/pipeline/schemas links to the top-level schemas/ (the single source), so wheels carry it
# too.
SCHEMA_DIR = Path(__file__).parent / "schemas"


@cache
def pipeline_schema() -> dict[str, Any]:
    path = SCHEMA_DIR / "pipeline.schema.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@cache
def _pipeline_validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(pipeline_schema())


@cache
def _pipeline_schema_text() -> str:
    return json.dumps(pipeline_schema(), sort_keys=True)


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
    import difflib  # only for a mistake (~0.7 ms of every start-up otherwise)

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
    again after evaluation). When ``step`` is not given, an error under ``steps.ID`` names ID.
    """
    out: list[InvalidPipeline] = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: (-len(e.path), str(e.path))):
        if tolerate_expressions and _about_expression(err):
            continue
        converted = _convert(err, where, step, context, base)
        if converted is not None:
            out.append(converted)
    return out


def _about_expression(err: ValidationError) -> bool:
    """The failing value (or, for oneOf/anyOf, one branch's failing value) is a ${{ }}."""
    if is_expression_string(err.instance):
        return True
    return err.validator in ("oneOf", "anyOf") and any(
        is_expression_string(e.instance) for e in err.context or []
    )


def _label(context: str, err: ValidationError) -> str:
    inner = ".".join(str(p) for p in err.absolute_path)
    return context + ("." if context and inner else "") + inner


def _step_of(step: str | None, base: tuple[Any, ...], path: tuple[Any, ...]) -> str | None:
    # Only a whole pipeline document (no base, no caller-given step) has steps at path[1].
    if step is None and not base and len(path) >= 2 and path[0] == "steps":
        return str(path[1])
    return step


def _alternatives(
    err: ValidationError,
    where: Any,
    step: str | None,
    at: str,
    path: tuple[Any, ...],
    context: str,
    base: tuple[Any, ...],
) -> InvalidPipeline | None:
    """A failed oneOf/anyOf: name the alternatives, or the error of the branch that fits best."""
    branches = err.validator_value if isinstance(err.validator_value, list) else []
    only_required = bool(branches) and all(
        isinstance(b, dict) and set(b) == {"required"} for b in branches
    )
    if only_required:
        keys = [k for b in branches for k in b["required"]]
        names = " or ".join(f"'{k}'" for k in keys)
        given = [k for k in keys if isinstance(err.instance, dict) and k in err.instance]
        if len(given) > 1:
            return InvalidPipeline(f"give only one of {names}{at}", where=where(path), step=step)
        return InvalidPipeline(
            f"missing {names}{at} (one is required)", where=where(path), step=step
        )
    leaves = list(err.context or [])
    # A branch that failed only on some deeper detail fits better than one of the wrong type.
    fitting = [e for e in leaves if e.validator != "type" or e.relative_path]
    if not fitting:
        kinds: list[str] = []
        for e in leaves:
            t = e.validator_value
            for k in t if isinstance(t, list) else [t]:
                if k not in kinds:
                    kinds.append(str(k))
        expected = " or ".join(kinds) or "another kind of value"
        return InvalidPipeline(
            f"expected {expected}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
            hint=_schema_hint(err),
        )
    best = max(fitting, key=lambda e: len(e.path))
    converted = _convert(best, where, step, context, base)
    hint = _schema_hint(err)
    if converted is not None and hint:
        converted.hint = hint
    return converted


def _convert(
    err: ValidationError, where: Any, step: str | None, context: str, base: tuple[Any, ...]
) -> InvalidPipeline | None:
    path = (*base, *err.absolute_path)
    label = _label(context, err)
    at = f" in '{label}'" if label else ""
    step = _step_of(step, base, path)
    schema = err.schema if isinstance(err.schema, dict) else {}
    description = _schema_hint(err)
    if "propertyNames" in err.relative_schema_path:
        # The instance is the offending key itself; point at the key, not the mapping.
        name = str(err.instance)
        rule = f"names here must match {schema['pattern']}" if "pattern" in schema else None
        if err.validator == "maxLength":
            rule = f"names here are at most {err.validator_value} characters"
        return InvalidPipeline(
            f"invalid name '{_clip(name)}'{at}",
            where=where((*path, name), key=True),
            step=None if not base else step,
            hint=rule,
        )
    if err.validator in ("oneOf", "anyOf"):
        return _alternatives(err, where, step, at, path, context, base)
    if err.validator == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        instance = err.instance if isinstance(err.instance, dict) else {}
        extra = [k for k in instance if k not in allowed]
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
            f"expected {expected}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
        )
    if err.validator == "propertyNames":
        return None  # the failing name is reported by its own error (see above)
    if err.validator == "const":
        return InvalidPipeline(
            f"expected {err.validator_value!r}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
            hint=description,
        )
    if err.validator == "enum":
        options = list(err.validator_value) if isinstance(err.validator_value, list) else []
        choices = ", ".join(repr(v) for v in options)
        hint = None
        if isinstance(err.instance, str):
            hint = did_you_mean(err.instance, [str(v) for v in options])
        return InvalidPipeline(
            f"expected one of {choices}{at}, found {_describe(err.instance)}",
            where=where(path),
            step=step,
            hint=hint,
        )
    if err.validator == "pattern":
        return InvalidPipeline(
            f"invalid value{at}: {_describe(err.instance)}",
            where=where(path),
            step=step,
            hint=description or f"it must match {err.validator_value}",
        )
    if err.validator in _BOUNDS:
        return InvalidPipeline(
            f"'{label or 'value'}' must be {_BOUNDS[err.validator]} {err.validator_value}, "
            f"found {_describe(err.instance)}",
            where=where(path),
            step=step,
        )
    if err.validator == "maxLength" and isinstance(err.instance, str):
        return InvalidPipeline(
            f"'{label or 'value'}' must be at most {err.validator_value} characters, "
            f"found {len(err.instance)}",
            where=where(path),
            step=step,
            hint=description,
        )
    if err.validator in ("minProperties", "minItems") and err.validator_value == 1:
        return InvalidPipeline(
            f"'{label or 'value'}' must not be empty",
            where=where(path),
            step=step,
            hint=description,
        )
    if err.validator == "uniqueItems" and isinstance(err.instance, list):
        index, dup = _first_repeat(err.instance)
        return InvalidPipeline(f"'{dup}' appears twice{at}", where=where((*path, index)), step=step)
    message = err.message
    if len(message) > 200:
        message = message[:199] + "…"
    return InvalidPipeline(f"{message}{at}", where=where(path), step=step)


def _schema_hint(err: ValidationError) -> str | None:
    schema = err.schema if isinstance(err.schema, dict) else {}
    text = schema.get("description")
    return _sentence(text) if isinstance(text, str) and text else None


def _sentence(text: str) -> str:
    """The first sentence of a schema description: enough for a hint."""
    head, dot, _rest = text.partition(". ")
    return head + "." if dot else text


_BOUNDS = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}


def _first_repeat(items: list[Any]) -> tuple[int, Any]:
    seen: list[Any] = []
    for i, item in enumerate(items):
        if item in seen:
            return i, item
        seen.append(item)
    return 0, None


def load_document(path: Path) -> PipelineDoc:
    """Read and schema-check a pipeline file. Raises InvalidPipeline."""
    display = _display(path)
    src = parse_file(path, display)
    if not isinstance(src.data, dict):
        raise InvalidPipeline(
            "a pipeline must be a mapping with runner:, name: and steps:, "
            f"found {_describe(src.data)}",
            where=Location(display, 1, 1),
        )
    if not surely_valid(_pipeline_schema_text(), src.data):
        errors = schema_errors(_pipeline_validator(), src.data, where=src.where)
        if errors:
            raise errors[0]
    return PipelineDoc(path, src, src.data)


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


def resolve_params(
    doc: PipelineDoc, overrides: Mapping[str, str], *, given: Collection[str] = ()
) -> dict[str, Any]:
    """Declared defaults + `-p key=value` overrides (parsed as YAML), each checked by type.
    Params named in ``given`` come typed from elsewhere (a run's recorded params): a required
    one among them is not missing.

    Raises UsageError for an unknown, ill-typed or missing override (located at the param's
    declaration, so the reader sees what it expects), InvalidPipeline for a bad declaration or
    default.
    """
    decls: dict[str, Any] = doc.data.get("params") or {}
    for key, decl in decls.items():
        _check_declaration(doc, key, decl)
    values: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key not in decls:
            hint = did_you_mean(key, decls) or (
                "declared params: " + ", ".join(sorted(decls))
                if decls
                else "the pipeline declares no params"
            )
            where = doc.where("params", key=True) if decls else doc.where()
            raise UsageError(
                f"unknown param '{_clip(key)}' (-p {_clip(key)}=...)", where=where, hint=hint
            )
        decl = decls[key]
        try:
            value = read_override(key, raw, decl["type"])
        except InvalidPipeline as exc:
            raise UsageError(
                f"param '{key}': {exc.message} (from -p {key}={_clip(raw)})",
                where=doc.where("params", key, key=True),
            ) from None
        problem = _param_problem(key, value, decl)
        if problem:
            raise UsageError(
                f"{problem} (from -p {key}={_clip(raw)})", where=doc.where("params", key, key=True)
            )
        values[key] = value
    for key, decl in decls.items():
        if key in values or (key in given and "default" not in decl):
            continue
        if "default" not in decl:
            raise UsageError(
                f"param '{key}' is required",
                where=doc.where("params", key, key=True),
                hint=f"pass it with -p {key}=VALUE",
            )
        problem = _param_problem(key, decl["default"], decl)
        if problem:
            raise InvalidPipeline(problem, where=doc.where("params", key, "default"))
        values[key] = decl["default"]
    _check_params_size(doc, values)
    return values


MAX_PARAMS_CHARS = 100_000_000  # a run's params as JSON: the journal stores them in one record


def _check_params_size(doc: PipelineDoc, values: dict[str, Any]) -> None:
    """Refuse params too large to store with the run (SQLite takes at most 1 GB a value)."""
    if sum(len(v) if isinstance(v, str) else 0 for v in values.values()) < 1_000_000:
        return  # the common case: no JSON text to build
    size = len(json.dumps(values, ensure_ascii=False))
    if size > MAX_PARAMS_CHARS:
        raise UsageError(
            f"the params are {size / 1e6:.0f} million characters as JSON, over the limit of "
            f"{MAX_PARAMS_CHARS / 1e6:.0f} million a run stores",
            where=doc.where("params", key=True),
            hint="keep large data in a file the pipeline reads (`uses: read`)",
        )


def read_override(key: str, raw: str, kind: str) -> Any:
    """A `-p` value read as YAML (as the pipeline is): `-p n=010` is ten, `-p country=NO` the
    text NO. Text that does not parse is the text itself. Raises InvalidPipeline for bytes that
    are not UTF-8 and, unless the param is a string (then it is the text as typed), for a value
    JSON cannot carry."""
    bad = _LONE.search(raw)
    if bad is not None:  # U+DC80-DCFF: how Python hands over command-line bytes not UTF-8
        code = ord(bad.group())
        if 0xDC80 <= code <= 0xDCFF:
            raise InvalidPipeline(
                f"not UTF-8 text (byte 0x{code - 0xDC00:02x} at offset {bad.start()})"
            )
        raise InvalidPipeline(f"not text (a lone surrogate U+{code:04X} at offset {bad.start()})")
    if raw == "":
        return ""
    quoted = _fully_quoted(raw)
    single = _SINGLE.fullmatch(raw) if quoted == "'" else None
    if single is not None:
        return single.group(1).replace("''", "'")
    try:
        # JSON is read by YAML 1.2 as the same value, except the surrogate-pair escapes JSON
        # writes for characters past U+FFFF (libyaml refuses them): JSON text is read as JSON,
        # so what json.dumps wrote (`runner resume` passes a run's params so) comes back exact.
        value = loads_strict(raw)
    except ValueError:
        value = _NOT_JSON
    try:
        if value is _NOT_JSON:
            value = load_data(_yaml_escaped(raw) if quoted == '"' else raw, f"-p {key}")
    except InvalidPipeline as exc:
        if quoted:  # quotes say "read me as YAML": never a text that keeps them by accident
            raise InvalidPipeline(
                f"the quoted value is not valid YAML ({exc.message.removeprefix('invalid YAML: ')})"
                "; drop the quotes to pass the text as typed"
            ) from None
        if kind == "string" or exc.message.startswith("invalid YAML"):
            return raw
        raise
    if kind == "string" and not isinstance(value, str):
        value = raw  # -p title=123 means the text "123" for a string param
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


_NOT_JSON = object()
_LONE = re.compile("[\ud800-\udfff]")


def _fully_quoted(raw: str) -> str | None:
    """The quote character when ``raw`` is one quoted YAML scalar (ends as it starts), else
    None: ``"Hello" world`` is text, ``"Hello world"`` a YAML string."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[0]
    return None


# Characters YAML refuses raw (not c-printable) or reads as something else (line breaks fold
# to a space, a tab at a fold is dropped, a BOM), which a double-quoted scalar carries as an
# escape: a value typed with them between double quotes arrives byte for byte.
_NOT_PRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")
# One single-quoted YAML scalar: no escapes, '' is a quote. Read directly (byte for byte: YAML
# would fold its line breaks and refuse control characters it cannot escape).
_SINGLE = re.compile(r"\s*'([^']*+(?:''[^']*+)*+)'\s*", re.DOTALL)  # possessive: no state a char
# A UTF-16 surrogate pair written as two \u escapes (what json.dumps writes for an emoji): JSON
# reads it as one character; libyaml refuses it, so it becomes YAML's \U escape. An escape
# preceded by an odd number of backslashes is not one (the backslash itself was escaped).
_PAIR = re.compile(
    r"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
)


def _yaml_escaped(raw: str) -> str:
    def pair(m: re.Match[str]) -> str:
        high, low = int(m.group(2), 16), int(m.group(3), 16)
        return f"{m.group(1)}\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"

    text = _PAIR.sub(pair, raw)
    return _NOT_PRINTABLE.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def _clip(text: str, n: int = 60) -> str:
    """``text`` for a message: cut to ``n`` characters, bytes that were not UTF-8 as \\xNN."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text if len(text) <= n else text[: n - 1] + "…"


def _check_declaration(doc: PipelineDoc, key: str, decl: Mapping[str, Any]) -> None:
    """A declaration whose own schema is broken (bad regex, bad `items`) is a pipeline error."""
    if "pattern" in decl:
        try:
            re.compile(decl["pattern"])
        except re.error as exc:
            raise InvalidPipeline(
                f"param '{key}': pattern is not a valid regular expression: {exc}",
                where=doc.where("params", key, "pattern"),
            ) from None
    if "items" not in decl:
        # The pipeline schema fixed every other part's type and the regex compiled: the
        # metaschema cannot object (jsonschema loads only for an `items` schema).
        return
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(param_schema(decl))
    except SchemaError as exc:
        raise InvalidPipeline(
            f"param '{key}': invalid declaration: {exc.message}", where=doc.where("params", key)
        ) from None


def _param_problem(key: str, value: Any, decl: Mapping[str, Any]) -> str | None:
    try:
        schema_text = json.dumps(param_schema(decl), sort_keys=True)
    except (TypeError, ValueError):  # e.g. a YAML date in `enum`: jsonschema judges it
        schema_text = None
    if schema_text is not None and surely_valid(schema_text, value):
        return None
    import jsonschema
    from jsonschema.exceptions import ValidationError

    try:
        jsonschema.validate(value, param_schema(decl), cls=jsonschema.Draft202012Validator)
    except ValidationError as err:
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        if err.validator == "type":  # of the value, or of an element (`items: {type: ...}`)
            expected = decl["type"] if not at else err.validator_value
            return f"param '{key}{at}' must be {expected}, found {_describe(err.instance)}"
        return f"param '{key}{at}': {err.message}"
    return None
