"""``json_schema``: a value is valid against a JSON Schema (2020-12), inline or from a file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import InvalidPipeline, Location
from ...source.datafiles import load_json, load_yaml
from ...source.paths import inside
from .. import Compiled, evaluate_value
from .base import VALUE_DESCRIPTION, CheckType, Path_, Rule, Scope, Verdict, register_check, show

MAX_ERRORS_SHOWN = 3

if TYPE_CHECKING:
    import jsonschema


def _json_path(parts: Iterable[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


class JsonSchemaRule(Rule):
    kind = "json_schema"

    def __init__(
        self,
        value: Compiled,
        validator: jsonschema.protocols.Validator,
        parse: bool,
        *,
        raw: Any,
        where: Location | None,
        schema_file: str | None = None,
    ) -> None:
        super().__init__(raw=raw, where=where)
        self.value = value
        self.validator = validator
        self.parse = parse
        self.schema_file = schema_file

    def compiled_from(self) -> Any:
        return self.validator.schema  # a schema_file's content, not only its name

    def own_files(self) -> dict[str, bool]:
        # Loaded when the pipeline compiles; named too, so the no-op fingerprint (which never
        # compiles) sees it edited.
        return {self.schema_file: True} if self.schema_file is not None else {}

    def own_values(self) -> Iterable[Compiled]:
        return (self.value,)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        value = evaluate_value(self.value, context)
        if self.parse:
            if not isinstance(value, str):
                return Verdict(False, [f"json_schema: expected JSON text, found {show(value)}"])
            try:
                value = load_json(value, "text")
            except InvalidPipeline as exc:  # NaN, an integer too long to print: refused too
                where = exc.where
                at = f" at line {where.line} column {where.column}" if where else ""
                return Verdict(
                    False, [f"json_schema: expected JSON text, found {exc.message}{at}"]
                )
        errors = sorted(self.validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
        if not errors:
            return Verdict(True)
        shown = "; ".join(
            f"at {_json_path(e.absolute_path)}: {e.message}" for e in errors[:MAX_ERRORS_SHOWN]
        )
        more = (
            f" (and {len(errors) - MAX_ERRORS_SHOWN} more)"
            if len(errors) > MAX_ERRORS_SHOWN
            else ""
        )
        count = "1 error" if len(errors) == 1 else f"{len(errors)} errors"
        return Verdict(
            False,
            [
                f"json_schema: expected a value valid against the schema, "
                f"found {count}: {shown}{more}"
            ],
        )


class JsonSchema(CheckType):
    name = "json_schema"
    description = (
        "Passes when `value` is valid against a JSON Schema (draft 2020-12) given "
        "inline (`schema`) or as a JSON/YAML file (`schema_file`, loaded when the pipeline "
        "compiles)."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["value"],
        "additionalProperties": False,
        "oneOf": [{"required": ["schema"]}, {"required": ["schema_file"]}],
        "properties": {
            "value": {"description": VALUE_DESCRIPTION},
            "schema": {"type": ["object", "boolean"], "description": "An inline JSON Schema."},
            "schema_file": {
                "type": "string",
                "description": "A JSON or YAML schema file, relative to the root.",
            },
            "parse": {
                "type": "boolean",
                "default": False,
                "description": "Parse the value as JSON text before validating it "
                "(for an LLM reply that should be JSON).",
            },
        },
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        if "schema_file" in args:
            schema = _load_schema(scope, args["schema_file"], (*path, "schema_file"))
            schema_path: Path_ = (*path, "schema_file")
        else:
            schema, schema_path = args["schema"], (*path, "schema")
        try:
            import jsonschema  # on first use: a ~0.1 s import most runs never need

            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise scope.error(f"json_schema: invalid schema: {exc.message}", schema_path) from None
        validator = jsonschema.Draft202012Validator(schema)
        return JsonSchemaRule(
            scope.value(args["value"], (*path, "value")),
            validator,
            bool(args.get("parse", False)),
            raw=args,
            where=scope.where(path),
            schema_file=args.get("schema_file"),
        )


def _load_schema(scope: Scope, rel: str, path: Path_) -> Any:
    try:
        file = inside(scope.root, rel)
        text = file.read_text(encoding="utf-8")
    except InvalidPipeline as exc:
        raise scope.error(f"json_schema: {exc.message}", path, exc.hint) from None
    except OSError as exc:
        raise scope.error(
            f"json_schema: cannot read schema file '{rel}': {exc.strerror}", path
        ) from None
    try:
        load = load_yaml if file.suffix in (".yaml", ".yml") else load_json
        return load(text, rel)
    except InvalidPipeline as exc:
        raise scope.error(f"json_schema: schema file {exc}", path) from None


register_check(JsonSchema())
