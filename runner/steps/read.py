"""`read`: one file or a glob of files into the key by content; output text, JSON or paths."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import InvalidPipeline, Location, StepFailure
from ..source.beneath import read_beneath
from ..source.datafiles import load_json, load_yaml
from ..source.document import decode_utf8
from ..source.globs import WILD, check_pattern, matches
from ..source.paths import inside
from ..source.regularfile import not_regular
from .base import StepContext, StepResult, StepType, invalid
from .outputshape import ANY, STRING, Shape, closed, from_doc, list_of


class ReadStep(StepType):
    name = "read"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
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
        if isinstance(path, str) and "${{" not in path and any(c in path for c in WILD):
            check_pattern(root, path, where)
        elif isinstance(path, str) and "${{" not in path:
            inside(root, path, where=where)
            what = not_regular(root / path)
            if what is not None:
                raise invalid(f"{path} is {what}, not a regular file", where)
            if not (root / path).is_file():
                raise invalid(f"file not found: {path}", where)

    def output_shape(self, args: Mapping[str, Any]) -> Shape:
        path, mode = args.get("path"), args.get("as", "text")
        if not isinstance(mode, str) or not isinstance(path, str) or "${{" in path + mode:
            return from_doc(self.output_doc)  # decided at run time: any of the fields
        content = {"text": STRING} if mode == "text" else {} if mode == "paths" else {"data": ANY}
        if any(ch in path for ch in WILD):
            entry = closed(path=STRING, **content)
            return closed(files=list_of(entry), paths=list_of(STRING))
        return closed(path=STRING, paths=list_of(STRING), **content)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        return matches(root, str(args["path"]))

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        pattern = str(args["path"])
        mode = args.get("as", "text")
        is_glob = any(ch in pattern for ch in WILD)
        paths = matches(ctx.root, pattern)
        if not paths and not is_glob:
            raise StepFailure(f"file not found: {pattern}")
        files = []
        for rel in paths:
            entry: dict[str, Any] = {"path": rel}
            if mode != "paths":
                try:
                    # as the disk is now: an earlier step may have swapped a directory
                    text = decode_utf8(read_beneath(ctx.root, rel), rel)
                    if mode in ("json", "yaml"):
                        entry["data"] = (load_json if mode == "json" else load_yaml)(text, rel)
                    else:
                        entry["text"] = text
                except FileNotFoundError:
                    raise StepFailure(f"file not found: {rel}") from None
                except OSError as exc:  # a FIFO, a directory, no permission: said, not a bug
                    raise StepFailure(f"cannot read {rel}: {exc.strerror}") from None
                except InvalidPipeline as exc:  # bad bytes or data, at file:line:column
                    raise StepFailure(str(exc)) from None
            files.append(entry)
        if is_glob:
            return StepResult(output={"files": files, "paths": paths})
        only = files[0]
        output = {k: v for k, v in only.items()}
        output["paths"] = paths
        return StepResult(output=output)
