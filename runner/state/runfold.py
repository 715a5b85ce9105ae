"""Unchanged re-applies, folded: a run that only repeats the run before it is not news.

Every apply is journaled as a run (its row holds what it did, an audit trail and what `latest`
names), but an apply that changed nothing (every step and element cached, with the same params
and the same result keys as the run of its pipeline and item before it) repeats that run. Lists
fold such repeats into the newest run of the chain, as terraform adds no state version for "no
changes": `runs list` and the page show one line per result, and how many applies repeated it;
`runs list --json` names, for each run, the run it repeats (``repeat_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from .journal import RUN_COLUMNS, Journal
from .records import loads

# The statuses of an execution that produced or reused a result (its key is the result's).
_RESULT = ("completed", "cached")
_CHUNK = 500  # ids per IN (...): well under SQLite's limit on bound values


@dataclass(frozen=True)
class Folded:
    """A listed run and the runs folded under it (older, each repeating the next newer one)."""

    run: dict[str, Any]
    repeats: tuple[str, ...]  # ids of the folded runs, newest first
    first: str  # the oldest run of the chain: the one whose result the others repeat

    def note(self) -> str:
        n = len(self.repeats)
        return (
            f"unchanged since {self.first}: {n} earlier run{'' if n == 1 else 's'} folded "
            "(runs list --all)"
        )


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + _CHUNK] for i in range(0, len(ids), _CHUNK)]


def _previous(journal: Journal, runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run id -> the run of its pipeline and item just before it (by start), for ``runs``."""
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        rows = journal.query(
            "SELECT id, status, kind, params FROM runs WHERE pipeline=? AND item IS ? AND "
            "(created_at<? OR (created_at=? AND id<?)) ORDER BY created_at DESC, id DESC LIMIT 1",
            (r["pipeline"], r["item"], r["created_at"], r["created_at"], r["id"]),
        )
        if rows:
            out[r["id"]] = rows[0]
    return out


def _held(journal: Journal, ids: Sequence[str]) -> dict[str, list[str]]:
    """The run whose rows each of ``ids`` has (itself, or the run it repeats: state/repeats.py)
    -> the ids that have them."""
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for part in _chunks(ids):
        marks = ",".join("?" * len(part))
        for r in journal.query(
            f"SELECT id, COALESCE(repeats, id) AS held FROM runs WHERE id IN ({marks})",
            tuple(part),
        ):
            out.setdefault(r["held"], []).append(r["id"])
            seen.add(r["id"])
    for i in ids:  # no run row: its own rows, if any
        if i not in seen:
            out.setdefault(i, []).append(i)
    return out


def _ran_something(journal: Journal, ids: Sequence[str]) -> set[str]:
    """Of ``ids``, the runs with an execution that was not answered from the cache."""
    held = _held(journal, ids)
    out: set[str] = set()
    for part in _chunks(sorted(held)):
        marks = ",".join("?" * len(part))
        for r in journal.query(
            f"SELECT DISTINCT run_id FROM executions WHERE run_id IN ({marks}) "
            "AND status<>'cached'",
            tuple(part),
        ):
            out.update(held[r["run_id"]])
    return out


def _results(journal: Journal, ids: Sequence[str]) -> dict[str, set[tuple[str, int, str]]]:
    """Run id -> its result keys by step and element."""
    held = _held(journal, ids)
    found: dict[str, set[tuple[str, int, str]]] = {h: set() for h in held}
    for part in _chunks(sorted(held)):
        marks = ",".join("?" * len(part))
        for r in journal.query(
            f"SELECT run_id, step_id, element, key FROM executions WHERE run_id IN ({marks}) "
            "AND status IN (?,?)",
            (*part, *_RESULT),
        ):
            element = -1 if r["element"] is None else int(r["element"])
            found[r["run_id"]].add((r["step_id"], element, r["key"] or ""))
    return {i: found[h] for h, named in held.items() for i in named}


def _params(run: dict[str, Any]) -> Any:
    """The run's params as values (the fast path and the engine may spell the JSON apart)."""
    raw = run.get("params")
    try:
        return loads(raw) if isinstance(raw, str) else raw
    except StoreError:  # damaged (verify names it): compared as it is
        return raw


def _plain(run: dict[str, Any]) -> bool:
    return run.get("status") == "completed" and (run.get("kind") or "run") == "run"


def repeats(journal: Journal, runs: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    """Run id -> the id of the run it repeats unchanged, or None, for each of ``runs``: a
    completed run that ran nothing (every execution cached) repeats the completed run of its
    pipeline and item before it when both have the same params and the same result keys."""
    out: dict[str, str | None] = {r["id"]: None for r in runs}
    candidates = [r for r in runs if _plain(r)]
    before = _previous(journal, candidates)
    candidates = [
        r
        for r in candidates
        if r["id"] in before and _plain(before[r["id"]]) and _params(before[r["id"]]) == _params(r)
    ]
    ran = _ran_something(journal, [r["id"] for r in candidates])
    candidates = [r for r in candidates if r["id"] not in ran]
    ids = sorted({r["id"] for r in candidates} | {before[r["id"]]["id"] for r in candidates})
    keys = _results(journal, ids)
    for r in candidates:
        prev = before[r["id"]]["id"]
        if keys[r["id"]] and keys[r["id"]] == keys[prev]:
            out[r["id"]] = prev
    return out


def repeat_of(journal: Journal, run: dict[str, Any]) -> str | None:
    """The id of the run ``run`` repeats unchanged (see ``repeats``), else None."""
    return repeats(journal, [run])[run["id"]]


def fold(
    journal: Journal, runs: Sequence[dict[str, Any]], known: dict[str, str | None] | None = None
) -> list[Folded]:
    """``runs`` (newest first) with each repeat folded into the newest run of its chain; the
    chain is followed beyond the listed runs too, so its count is whole. ``known``: the
    ``repeats`` of the runs, when the caller has them."""
    of = dict(known) if known is not None else repeats(journal, runs)
    listed = {r["id"]: r for r in runs}
    folded: set[str] = set()
    out: list[Folded] = []
    for run in runs:
        if run["id"] in folded:
            continue
        chain: list[str] = []
        current = run["id"]
        while True:
            if current not in of:  # a run beyond the listed ones: read it
                found = journal.query(f"SELECT {RUN_COLUMNS} FROM runs WHERE id=?", (current,))
                if not found:
                    break
                of.update(repeats(journal, found))
            earlier = of.get(current)
            if earlier is None or earlier in chain:
                break
            chain.append(earlier)
            if earlier in listed:
                folded.add(earlier)
            current = earlier
        out.append(Folded(run, tuple(chain), chain[-1] if chain else run["id"]))
    return out


def list_folded(journal: Journal, *, limit: int, **filters: Any) -> list[Folded]:
    """Up to ``limit`` lines of `runs list` (``filters`` as Journal.list_runs takes them), each
    repeat folded: runs are read until ``limit`` lines are made or none are left."""
    fetch = max(limit, 1)
    while True:
        rows = journal.list_runs(limit=fetch, **filters)
        lines = fold(journal, rows)
        if len(lines) > limit or len(rows) < fetch or fetch >= 100_000:
            return lines[:limit]
        fetch *= 4
