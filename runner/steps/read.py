"""`read`: one file or a glob of files into the key by content; output text, JSON or paths."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from ..datafiles import load_json, load_yaml
from ..errors import InvalidPipeline, Location, StepFailure
from ..pipeline.paths import inside
from ..pipeline.source import decode_utf8
from .base import StepContext, StepResult, StepType, invalid

_WILD = "*?["


def _check_pattern(root: Path, pattern: str, where: Location | None = None) -> None:
    """A glob stays inside the root: its fixed leading part resolves inside it, and no part
    after a wildcard climbs with `..`. Raises InvalidPipeline."""
    if os.path.isabs(pattern):
        inside(root, pattern, where=where)  # refuses it, worded as for any absolute path
    parts = PurePosixPath(pattern).parts
    fixed = 0
    while fixed < len(parts) and not any(ch in parts[fixed] for ch in _WILD):
        fixed += 1
    if ".." in parts[fixed:]:
        raise InvalidPipeline(
            f"path '{pattern}' escapes the pipeline root {os.path.realpath(root)}",
            where=where,
            hint="a glob may not climb with '..' after a wildcard",
        )
    if fixed:
        prefix = "/".join(parts[:fixed])
        try:
            inside(root, prefix, where=where)
        except InvalidPipeline as exc:  # word it for the pattern the user wrote
            exc.message = exc.message.replace(f"'{prefix}'", f"'{pattern}'", 1)
            raise


def _matches(root: Path, pattern: str) -> list[str]:
    if any(ch in pattern for ch in _WILD):
        _check_pattern(root, pattern)
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
    runs_anywhere = True  # a Dask worker may run it (engine/executors.py)
    version = "1"
    description = "Read a file or a glob of files (as text, JSON/YAML data, or paths)."
    predictable: ClassVar[bool] = True  # runner plan computes it to see past it
    output_doc: ClassVar[dict[str, str]] = {
        "path": "string: the file read (one file, not a glob)",
        "text": "string: its text (as: text, the default)",
        "data": "its parsed content (as: json or yaml)",
        "files": "list: with a glob, one {path, text | data} per match (path only with as: paths)",
        "paths": "list of strings: the paths read, sorted",
    }
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
        if isinstance(path, str) and "${{" not in path and any(c in path for c in _WILD):
            _check_pattern(root, path, where)
        elif isinstance(path, str) and "${{" not in path:
            inside(root, path, where=where)
            if not (root / path).is_file():
                raise invalid(f"file not found: {path}", where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return _matches(root, str(args["path"]))

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        pattern = str(args["path"])
        mode = args.get("as", "text")
        is_glob = any(ch in pattern for ch in _WILD)
        paths = _matches(ctx.root, pattern)
        if not paths and not is_glob:
            raise StepFailure(f"file not found: {pattern}")
        files = []
        for rel in paths:
            entry: dict[str, Any] = {"path": rel}
            if mode != "paths":
                try:
                    text = decode_utf8((ctx.root / rel).read_bytes(), rel)
                    if mode in ("json", "yaml"):
                        entry["data"] = (load_json if mode == "json" else load_yaml)(text, rel)
                    else:
                        entry["text"] = text
                except FileNotFoundError:
                    raise StepFailure(f"file not found: {rel}") from None
                except InvalidPipeline as exc:  # bad bytes or data, at file:line:column
                    raise StepFailure(str(exc)) from None
            files.append(entry)
        if is_glob:
            return StepResult(output={"files": files, "paths": paths})
        only = files[0]
        output = {k: v for k, v in only.items()}
        output["paths"] = paths
        return StepResult(output=output)
