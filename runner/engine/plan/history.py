"""An item's history of a step, as the planner reads it to say why an element would run: its
last execution of each for_each value, and whether `runner gc` removed its earlier results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ...state.journal import Journal
from ...state.records import loads


class ItemHistory:
    """Read once per step and plan (a for_each's elements share the queries)."""

    def __init__(self, journal: Journal, pipeline: str, item: str | None, state_dir: Path) -> None:
        self.journal = journal
        self.pipeline = pipeline
        self.item = item
        self.state_dir = state_dir
        self._by_value: dict[str, dict[str, Any]] = {}  # step -> value -> last execution
        self._gc_removed: dict[tuple[str, str | None, str], float] | None = None

    def removed(self, step_id: str, since: float | None = None) -> str | None:
        """Why the step has no earlier execution to compare with, when a gc removed results of
        this step of this item's runs (state/gc.py records which) after ``since``; else None."""
        if self._gc_removed is None:
            from ...state.gc import forgotten

            self._gc_removed = forgotten(self.state_dir)
        at = self._gc_removed.get((self.pipeline, self.item, step_id))
        if at is None or (since is not None and at < since):
            return None
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
        return f"its earlier results were removed by `runner gc` ({when})"

    def by_value(self, step_id: str) -> dict[str, Any]:
        """The step's last execution of each for_each value (by its key parts' item digest),
        among this item's runs; read only when an element's value moved."""
        found = self._by_value.get(step_id)
        if found is None:
            rows = self.journal.query(
                "SELECT e.key, e.status, e.error, e.key_parts, e.started_at, e.report "
                "FROM executions e JOIN runs r ON r.id = e.run_id "
                "WHERE e.pipeline=? AND e.step_id=? "
                "AND e.element >= 0 AND e.key_parts IS NOT NULL AND e.status NOT IN ('running') "
                "AND r.item IS ? ORDER BY e.id",
                (self.pipeline, step_id, self.item),
            )
            found = {}
            for row in rows:  # oldest first: the last execution of a value wins
                value = (loads(row["key_parts"]) or {}).get("item")
                if value is not None:
                    found[value] = row
            self._by_value[step_id] = found
        return found
