"""Collections: named document tables with full-text search, in ``collections.db`` of a state dir.

Each collection is a table of documents keyed by a stable id (the source path relative to the
pipeline root, or an id the pipeline declares), so ingesting the same documents again updates
rows instead of adding them. An FTS5 index mirrors the text. The ``collection_has`` check asks
this module (``bind_state`` says which state directory the running apply uses).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import NotFound, StoreError, UsageError
from ..expr.checks import CollectionQuery, Verdict, set_collection_backend
from .masked import MaskedConnection
from .wal import wal_mode

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_STATE: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "runner_collections_state", default=None
)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        body = json.dumps(
            [self.text, self.source, self.metadata], sort_keys=True, ensure_ascii=False
        )
        return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass
class UpsertResult:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "inserted": len(self.inserted),
            "updated": len(self.updated),
            "unchanged": len(self.unchanged),
        }


def check_name(name: str) -> str:
    """Raise UsageError unless ``name`` is a valid collection name ([a-z][a-z0-9_]*)."""
    if not _NAME.match(name):
        raise UsageError(f"invalid collection name '{name}' (lower-case letters, digits, _)")
    return name


class Collections:
    """The collections of one state directory. Use as a context manager or call ``close``."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "collections.db"
        self._named: set[str] = set()  # collections whose index holds document ids
        try:
            self.conn = sqlite3.connect(
                self.path,
                timeout=30.0,
                isolation_level=None,
                factory=MaskedConnection,  # documents ingested hold no known secret
            )
            wal_mode(self.conn, self.path)
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS collections (name TEXT PRIMARY KEY, "
                "created_at REAL NOT NULL, description TEXT)"
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Collections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- collections -------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM collections WHERE name=?", (name,)).fetchone()
            is not None
        )

    def require(self, name: str) -> None:
        """Raise NotFound (exit 3) for an unknown collection."""
        if not self.exists(check_name(name)):
            known = [c["name"] for c in self.names_and_counts()]
            raise NotFound(
                f"unknown collection '{name}'",
                hint="create it with `create: true` on the ingest step; known: "
                + (", ".join(known) or "none"),
            )

    def create(self, name: str, description: str | None = None) -> bool:
        """Create ``name`` if it does not exist; True when it was created."""
        check_name(name)
        if self.exists(name):
            return False
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute(
                f"CREATE TABLE IF NOT EXISTS c_{name} (doc_id TEXT PRIMARY KEY, source TEXT, "
                "text TEXT NOT NULL, metadata TEXT NOT NULL, sha256 TEXT NOT NULL, "
                "updated_at REAL NOT NULL)"
            )
            self.conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS c_{name}_fts USING {_FTS_COLUMNS}"
            )
            self.conn.execute(
                "INSERT OR IGNORE INTO collections VALUES (?,?,?)", (name, time.time(), description)
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return True

    def names_and_counts(self) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT name, created_at, description FROM collections ORDER BY name"
        ).fetchall()
        return [
            {"name": n, "created_at": c, "description": d, "count": self.count(n)}
            for n, c, d in rows
        ]

    # -- documents ---------------------------------------------------------------------------

    def upsert(self, name: str, docs: Iterable[Document]) -> UpsertResult:
        """Insert new documents, update changed ones, leave identical ones alone (one
        transaction). Raises NotFound for an unknown collection."""
        self.require(name)
        self._index_names(name)
        result = UpsertResult()
        now = time.time()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for doc in docs:
                row = self.conn.execute(
                    f"SELECT rowid, sha256 FROM c_{name} WHERE doc_id=?", (doc.id,)
                ).fetchone()
                values = (
                    doc.source,
                    doc.text,
                    json.dumps(doc.metadata, sort_keys=True, ensure_ascii=False),
                    doc.sha256,
                    now,
                )
                if row is None:
                    cur = self.conn.execute(
                        f"INSERT INTO c_{name} (doc_id, source, text, metadata, sha256, "
                        "updated_at) VALUES (?,?,?,?,?,?)",
                        (doc.id, *values),
                    )
                    self.conn.execute(
                        f"INSERT INTO c_{name}_fts (rowid, doc_id, text, name) VALUES (?,?,?,?)",
                        (cur.lastrowid, doc.id, doc.text, doc.id),
                    )
                    result.inserted.append(doc.id)
                elif row[1] == doc.sha256:
                    result.unchanged.append(doc.id)
                else:
                    self.conn.execute(
                        f"UPDATE c_{name} SET source=?, text=?, metadata=?, sha256=?, "
                        "updated_at=? WHERE doc_id=?",
                        (*values, doc.id),
                    )
                    self.conn.execute(f"DELETE FROM c_{name}_fts WHERE rowid=?", (row[0],))
                    self.conn.execute(
                        f"INSERT INTO c_{name}_fts (rowid, doc_id, text, name) VALUES (?,?,?,?)",
                        (row[0], doc.id, doc.text, doc.id),
                    )
                    result.updated.append(doc.id)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return result

    def count(self, name: str, where: Mapping[str, Any] | None = None) -> int:
        sql, args = self._where(name, where)
        return int(self.conn.execute(f"SELECT COUNT(*) FROM c_{name}{sql}", args).fetchone()[0])

    def _where(self, name: str, where: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
        check_name(name)
        clauses, args = [], []
        for k, v in (where or {}).items():
            if k in ("doc_id", "source", "text"):
                clauses.append(f"{k}=?")
                args.append(v)
            else:
                clauses.append("json_extract(metadata, ?)=?")
                args.extend([f'$."{k}"', json.dumps(v) if isinstance(v, (dict, list)) else v])
        return ((" WHERE " + " AND ".join(clauses)) if clauses else ""), args

    def present(self, name: str, ids: Iterable[str]) -> set[str]:
        wanted = list(ids)
        found: set[str] = set()
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" for _ in chunk)
            found |= {
                r[0]
                for r in self.conn.execute(
                    f"SELECT doc_id FROM c_{name} WHERE doc_id IN ({marks})", chunk
                )
            }
        return found

    def documents(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        self.require(name)
        rows = self.conn.execute(
            f"SELECT doc_id, source, text, metadata, sha256, updated_at FROM c_{name} "
            "ORDER BY doc_id LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            {
                "id": r[0],
                "source": r[1],
                "text": r[2],
                "metadata": json.loads(r[3]),
                "sha256": r[4],
                "updated_at": r[5],
            }
            for r in rows
        ]

    def search(
        self, name: str, query: str, limit: int = 20, *, syntax: bool = False
    ) -> list[dict[str, Any]]:
        """Full-text search in the text and the document's id (its file name), best match
        first. ``query`` is words, each searched as a word (or a hyphenated phrase), unless
        ``syntax`` asks for an FTS5 query. UsageError for a bad query."""
        self.require(name)
        self._index_names(name)
        match = query if syntax else words_query(query)
        try:
            rows = self.conn.execute(
                f"SELECT f.doc_id, snippet(c_{name}_fts, 1, '[', ']', '...', 12), "
                f"bm25(c_{name}_fts), d.metadata FROM c_{name}_fts f "
                f"JOIN c_{name} d ON d.rowid = f.rowid "
                f"WHERE c_{name}_fts MATCH ? ORDER BY bm25(c_{name}_fts) LIMIT ?",
                (match, limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            hint = "without --syntax the words are searched as words" if syntax else None
            raise UsageError(f"invalid search query {query!r}: {exc}", hint=hint) from None
        return [
            {"id": r[0], "snippet": r[1], "score": round(-r[2], 6), "metadata": json.loads(r[3])}
            for r in rows
        ]

    def _index_names(self, name: str) -> None:
        """Collections made before ids were searchable get the ``name`` column once: the index
        is rebuilt from the documents table (which holds everything it mirrors)."""
        if name in self._named:
            return
        cols = {r[1] for r in self.conn.execute(f"PRAGMA table_info(c_{name}_fts)")}
        if "name" not in cols:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute(f"DROP TABLE IF EXISTS c_{name}_fts")
                self.conn.execute(f"CREATE VIRTUAL TABLE c_{name}_fts USING {_FTS_COLUMNS}")
                self.conn.execute(
                    f"INSERT INTO c_{name}_fts (rowid, doc_id, text, name) "
                    f"SELECT rowid, doc_id, text, doc_id FROM c_{name}"
                )
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
        self._named.add(name)


# The text and the document's id (a file name: the tokenizer splits it at / - and .).
_FTS_COLUMNS = "fts5(doc_id UNINDEXED, text, name)"


def words_query(text: str) -> str:
    """A user's words as an FTS5 query: each whitespace-separated word a quoted string (so
    `acme-invoice` is the phrase acme invoice, and OR, NEAR, *, : and quotes are just text),
    all of them required."""
    words = text.split()
    if not words:
        raise UsageError("the search query is empty")
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


# -- the collection_has check ----------------------------------------------------------------


def bind_state(state_dir: Path) -> None:
    """Make ``collection_has`` checks in this context (an apply) read ``state_dir``."""
    _STATE.set(state_dir)


def answer(query: CollectionQuery) -> Verdict:
    """The ``collection_has`` backend: ids present and/or enough records matching ``where``."""
    state = _STATE.get()
    if state is None or not (state / "collections.db").exists():
        return Verdict(False, [f"collection_has: unknown collection '{query.collection}'"])
    with Collections(state) as cols:
        if not _NAME.match(query.collection) or not cols.exists(query.collection):
            return Verdict(False, [f"collection_has: unknown collection '{query.collection}'"])
        reasons: list[str] = []
        if query.ids is not None:
            missing = sorted(set(query.ids) - cols.present(query.collection, query.ids))
            if missing:
                reasons.append(
                    f"collection_has: {len(missing)} document(s) missing from "
                    f"'{query.collection}': {', '.join(missing[:5])}"
                )
        if query.ids is None or query.where or query.min_count != 1:
            n = cols.count(query.collection, query.where)
            if n < query.min_count:
                reasons.append(
                    f"collection_has: '{query.collection}' holds {n} matching "
                    f"record(s), expected at least {query.min_count}"
                )
    return Verdict(not reasons, reasons)


set_collection_backend(answer)
