"""``file_nonempty``: a file inside the pipeline root exists and is not empty."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidPipeline, Location
from ...source.beneath import OutsideRoot, open_beneath
from ...source.paths import inside
from .. import Compiled, evaluate_value, is_static
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check, show


class FileNonemptyRule(Rule):
    kind = "file_nonempty"

    def __init__(self, path: Compiled, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.path = path

    def own_values(self) -> Iterable[Compiled]:
        return (self.path,)

    def _check(self, context: Mapping[str, Any], root: Path) -> Verdict:
        rel = evaluate_value(self.path, context)
        if not isinstance(rel, str):
            return Verdict(
                False, [f"file_nonempty: expected a path, found {show(rel)}"], error=True
            )
        try:
            target = inside(root, rel)
        except InvalidPipeline as exc:
            return Verdict(False, [f"file_nonempty: {exc.message}"], error=True)
        expected = f"file_nonempty: expected a non-empty file at {show(rel)}, found"
        if target.is_dir():
            return Verdict(False, [f"{expected} a directory"])
        try:  # the file as opened now: an earlier step may have swapped a directory on its path
            fd = open_beneath(root, rel)
        except FileNotFoundError:
            return Verdict(False, [f"{expected} no file"])
        except OutsideRoot as exc:
            return Verdict(False, [f"file_nonempty: {show(rel)} {exc.strerror}"], error=True)
        except OSError as exc:  # a FIFO, a device, no permission
            return Verdict(False, [f"{expected} {exc.strerror}"])
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size == 0:
            return Verdict(False, [f"{expected} an empty file"])
        return Verdict(True)


class FileNonempty(CheckType):
    name = "file_nonempty"
    description = (
        "Passes when the file (relative to the pipeline root, which it may not leave) "
        "exists and holds at least one byte."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "Path relative to the pipeline root; may hold ${{ }} expressions.",
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        compiled = scope.value(args, path)
        if is_static(compiled):
            try:
                inside(scope.root, args)
            except InvalidPipeline as exc:
                raise scope.error(f"file_nonempty: {exc.message}", path, exc.hint) from None
        return FileNonemptyRule(compiled, raw=args, where=scope.where(path))


register_check(FileNonempty())
