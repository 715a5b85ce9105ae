"""Every stored text and JSON value of a journal, read as the bytes SQLite holds: which cells a
command could not read as they are (`runner verify`), and what `--repair` puts in their place.

A text cell must be UTF-8 (SQLite stores whatever bytes it is given; a damaged page or a hand
edit can leave others). A JSON cell must also parse as RFC 8259 JSON within the nesting a reader
survives, with finite numbers only (a NaN read back reaches `runs show --json` and every reader
as invalid JSON).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from .canonical import loads_strict
from .records import JSON_COLUMNS

MAX_JSON_DEPTH = 500  # deeper than any value runner records; a reader's recursion stops near 1000


@dataclass(frozen=True)
class BadCell:
    table: str
    column: str
    rowid: int
    problem: str  # "not UTF-8 text" or "not valid JSON: ..."
    mended: str | None  # what --repair writes instead (None: the value is cleared)

    def line(self) -> str:
        return f"journal record {self.table} #{self.rowid}: {self.column} is {self.problem}"


def bad_cells(conn: sqlite3.Connection) -> Iterator[BadCell]:
    """Every text cell of the journal on ``conn`` that is not UTF-8, and every JSON cell that
    does not parse (strictly, depth-bounded). Reads bytes: ``conn``'s text_factory is set to
    bytes for the scan and put back after."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    tables = {
        t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")') if str(r[1]).isidentifier()]
        for t in names
        if isinstance(t, str) and t.isidentifier() and not t.startswith("sqlite_")
    }
    before = conn.text_factory
    conn.text_factory = bytes
    try:
        for table, cols in tables.items():
            json_cols = set(JSON_COLUMNS.get(table, ()))
            for col in cols:
                try:
                    rows = conn.execute(
                        f'SELECT rowid, "{col}" FROM "{table}" WHERE typeof("{col}")=\'text\''
                    )
                except sqlite3.OperationalError:  # a WITHOUT ROWID table: none in the schema
                    break
                for rowid, raw in rows:
                    bad = _check(raw, col in json_cols)
                    if bad is not None:
                        yield BadCell(table, col, int(rowid), *bad)
    finally:
        conn.text_factory = before


def _check(raw: bytes, is_json: bool) -> tuple[str, str | None] | None:
    try:
        text = raw.decode("utf-8")
        problem = None
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        problem = "not UTF-8 text"
    if is_json:
        why = json_problem(text)
        if why is not None:
            return f"not valid JSON ({why})", None
    return (problem, text) if problem is not None else None


def json_problem(text: str) -> str | None:
    """Why ``text`` is not a JSON value a reader can take, or None."""
    if _depth(text) > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH}"
    try:
        loads_strict(text)
    except ValueError as exc:
        return str(exc)[:200]
    return None


def _depth(text: str) -> int:
    # Few brackets at all (nearly every value): no walk needed.
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def mend(conn: sqlite3.Connection, cells: list[BadCell]) -> None:
    """Write what --repair puts in each bad cell (in the caller's transaction)."""
    for c in cells:
        conn.execute(f'UPDATE "{c.table}" SET "{c.column}"=? WHERE rowid=?', (c.mended, c.rowid))
