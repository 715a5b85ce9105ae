"""`ingest`: upsert documents into a named collection (SQLite + FTS5 in the state directory).

A document's id is the one the pipeline declares, else its source path relative to the pipeline
root, so ingesting the same sources again updates rows and never duplicates them. Metadata
fields become queryable by ``collection_has: {where: ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location, NotFound, StepFailure, UsageError
from ..source.beneath import read_beneath
from ..source.paths import inside
from .base import StepContext, StepResult, StepType, invalid

_DOC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": ["string", "integer"], "description": "Stable id (default: the path)."},
        "path": {"type": "string", "description": "Source file, relative to the pipeline root."},
        "text": {"type": "string", "description": "The text (default: the file's content)."},
        "metadata": {"type": "object", "description": "Fields stored with the document."},
    },
}


class IngestStep(StepType):
    name: ClassVar[str] = "ingest"
    shareable: ClassVar[bool] = False  # its effect is a collection in this state, not objects
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Upsert documents into a named collection (full-text search)."
    output_doc: ClassVar[dict[str, str]] = {
        "collection": "string: the collection's name",
        "ids": "list of strings: the document ids upserted",
        "created": "boolean: whether this step created the collection",
        "count": "integer: documents in the collection afterwards",
        "inserted": "integer: documents added",
        "updated": "integer: documents changed",
        "unchanged": "integer: documents already as given",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["collection", "documents"],
        "properties": {
            "collection": {"type": "string", "description": "The collection's name."},
            "create": {
                "type": "boolean",
                "default": False,
                "description": "Create the collection when it does not exist (else an "
                "unknown collection is an error).",
            },
            "documents": {
                "description": "The documents: a list (or one ${{ }} giving one) of "
                "{id?, path?, text?, metadata?}.",
                "anyOf": [{"type": "array", "items": _DOC_SCHEMA}, {"type": "string"}],
            },
            "metadata": {
                "type": "object",
                "description": "Fields added to every document's metadata.",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        docs = args.get("documents")
        if isinstance(docs, list):
            for i, d in enumerate(docs):
                if isinstance(d, dict) and not ({"path", "id"} & set(d)):
                    raise invalid(f"ingest: documents[{i}] needs a `path` or an `id`", where)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        docs = args.get("documents") or []
        return sorted(
            {
                str(d["path"])
                for d in docs
                if isinstance(d, dict) and d.get("path") and "text" not in d
            }
        )

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        from ..state.collections import Collections, Document

        docs = args["documents"]
        if not isinstance(docs, list):
            raise StepFailure(f"ingest: documents must be a list, found {type(docs).__name__}")
        common = dict(args.get("metadata") or {})
        prepared: list[Document] = []
        for i, raw in enumerate(docs):
            if not isinstance(raw, dict):
                raise StepFailure(f"ingest: documents[{i}] must be a mapping")
            path = raw.get("path")
            doc_id = raw.get("id", path)
            if doc_id is None:
                raise StepFailure(f"ingest: documents[{i}] needs a `path` or an `id`")
            text = raw.get("text")
            if text is None:
                if path is None:
                    raise StepFailure(f"ingest: documents[{i}] has neither `text` nor `path`")
                inside(ctx.root, str(path))
                try:
                    text = read_beneath(ctx.root, str(path)).decode("utf-8")  # as opened now
                except FileNotFoundError:
                    raise StepFailure(f"ingest: file not found: {path}") from None
                except OSError as exc:  # outside the root by now, a FIFO, no permission
                    raise StepFailure(f"ingest: cannot read {path}: {exc.strerror}") from None
            prepared.append(
                Document(
                    str(doc_id),
                    str(text),
                    str(path) if path else None,
                    {**common, **(raw.get("metadata") or {})},
                )
            )
        ids = [d.id for d in prepared]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise StepFailure(f"ingest: duplicate document ids: {', '.join(dup[:5])}")
        name = str(args["collection"])
        try:
            with Collections(ctx.env.state_dir) as cols:
                created = cols.create(name) if args.get("create") else False
                result = cols.upsert(name, prepared)
                count = cols.count(name)
        except (NotFound, UsageError) as exc:
            raise StepFailure(f"ingest: {exc}") from None
        ctx.log(f"ingest: {name}: {result.to_json()}")
        return StepResult(
            output={
                "collection": name,
                "ids": ids,
                "created": created,
                "count": count,
                **result.to_json(),
            }
        )
