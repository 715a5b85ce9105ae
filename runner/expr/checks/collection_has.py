"""``collection_has``: records landed in a collection. The syntax is defined here; the module
that owns collections (``ingest``) supplies the lookup with ``set_collection_backend``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...errors import Location
from .. import Compiled, evaluate_value
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check


@dataclass(frozen=True)
class CollectionQuery:
    """What a ``collection_has`` rule asks, with every expression already evaluated."""

    collection: str
    ids: tuple[str, ...] | None  # stable document ids that must all be present
    where: Mapping[str, Any]  # field -> value, exact matches
    min_count: int
    root: Path


CollectionBackend = Callable[[CollectionQuery], "Verdict | Awaitable[Verdict]"]
_BACKEND: list[CollectionBackend] = []


def set_collection_backend(backend: CollectionBackend | None) -> None:
    """Install (or with None remove) the function that answers ``collection_has`` queries."""
    _BACKEND.clear()
    if backend is not None:
        _BACKEND.append(backend)


def collection_backend() -> CollectionBackend | None:
    """The installed backend, if any (so a caller can put it back after replacing it)."""
    return _BACKEND[0] if _BACKEND else None


class CollectionHasRule(Rule):
    kind = "collection_has"
    is_sync = False

    def __init__(self, args: Compiled, *, raw: Any, where: Location | None) -> None:
        super().__init__(raw=raw, where=where)
        self.args = args

    def own_values(self) -> Iterable[Compiled]:
        return (self.args,)

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        if not _BACKEND:
            return Verdict(
                False,
                [
                    "collection_has: no collection backend is installed "
                    "(the ingest module provides it)"
                ],
                error=True,
            )
        args = evaluate_value(self.args, context)
        ids = args.get("ids", [args["id"]] if "id" in args else None)
        query = CollectionQuery(
            collection=args["collection"],
            ids=tuple(str(i) for i in ids) if ids is not None else None,
            where=dict(args.get("where", {})),
            min_count=int(args.get("min_count", 1)),
            root=root,
        )
        answer = _BACKEND[0](query)
        return await answer if inspect.isawaitable(answer) else answer


class CollectionHas(CheckType):
    name = "collection_has"
    description = (
        "Passes when the named collection holds the given document ids and/or at "
        "least `min_count` records matching `where` (answered by the ingest module)."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["collection"],
        "additionalProperties": False,
        "properties": {
            "collection": {
                "type": "string",
                "minLength": 1,
                "description": "The collection's name (unknown names fail).",
            },
            "id": {"description": "One stable document id that must be present (or ${{ }})."},
            "ids": {
                "description": "Document ids that must all be present: a list or ${{ }}.",
                "anyOf": [{"type": "array"}, {"type": "string"}],
            },
            "where": {
                "type": "object",
                "description": "Field -> value that records must match exactly.",
            },
            "min_count": {
                "type": "integer",
                "minimum": 0,
                "default": 1,
                "description": "At least this many matching records.",
            },
        },
        "not": {"required": ["id", "ids"]},
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        return CollectionHasRule(scope.value(args, path), raw=args, where=scope.where(path))


register_check(CollectionHas())
