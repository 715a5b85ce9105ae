"""`read`: one file or a glob of files into the key by content; output text, JSON or paths."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ..errors import Location, StepFailure
from ..paths import inside
from .base import StepContext, StepResult, StepType, invalid

# libyaml's loader is ~10x faster on data files of thousands of records; same safe types.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _matches(root: Path, pattern: str) -> list[str]:
    if any(ch in pattern for ch in "*?["):
        base = root.resolve()
        found = []
        for p in sorted(root.glob(pattern)):
            if p.is_file():
                inside(root, p.relative_to(root).as_posix())
                found.append(p.resolve().relative_to(base).as_posix())
        return found
    inside(root, pattern)
    return [pattern]


class ReadStep(StepType):
    name = "read"
    version = "1"
    description = "Read a file or a glob of files (as text, JSON/YAML data, or paths)."
    predictable: ClassVar[bool] = True  # runner plan computes it to see past it
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["path"],
        "properties": {
            "path": {
                "type": "string",
                "description": "A file or a glob, relative to the pipeline.",
            },
            "as": {
                "enum": ["text", "json", "yaml", "paths"],
                "description": "text (default), json, yaml (parsed data) or paths only.",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        path = args.get("path")
        if isinstance(path, str) and "${{" not in path and not any(c in path for c in "*?["):
            inside(root, path, where=where)
            if not (root / path).is_file():
                raise invalid(f"file not found: {path}", where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return _matches(root, str(args["path"]))

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        pattern = str(args["path"])
        mode = args.get("as", "text")
        is_glob = any(ch in pattern for ch in "*?[")
        paths = _matches(ctx.root, pattern)
        if not paths and not is_glob:
            raise StepFailure(f"file not found: {pattern}")
        files = []
        for rel in paths:
            entry: dict[str, Any] = {"path": rel}
            if mode != "paths":
                try:
                    text = (ctx.root / rel).read_text(encoding="utf-8")
                except FileNotFoundError:
                    raise StepFailure(f"file not found: {rel}") from None
                except UnicodeDecodeError:
                    raise StepFailure(f"{rel} is not UTF-8 text") from None
                if mode == "json":
                    try:
                        entry["data"] = json.loads(text)
                    except json.JSONDecodeError as exc:
                        raise StepFailure(
                            f"{rel}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}"
                        ) from None
                elif mode == "yaml":
                    try:
                        entry["data"] = yaml.load(text, Loader=_YAML_LOADER)
                    except yaml.YAMLError as exc:
                        raise StepFailure(f"{rel}: invalid YAML: {exc}") from None
                else:
                    entry["text"] = text
            files.append(entry)
        if is_glob:
            return StepResult(output={"files": files, "paths": paths})
        only = files[0]
        output = {k: v for k, v in only.items()}
        output["paths"] = paths
        return StepResult(output=output)
