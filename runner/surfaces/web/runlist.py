"""The run list as the page shows it (`/`): runs grouped by pipeline, each with its duration,
its steps counted and a preview, an unchanged re-apply folded into the newest run of its result
(state/runfold.py)."""

from __future__ import annotations

from typing import Any

from ...engine.run.apply import State
from ...state.records import loads
from .service import status_words


def run_list_page(state: State, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run list as the page shows it: runs grouped by pipeline (the group of the newest run
    first), each with its duration, its steps counted (from the progress the run records) and,
    for an image run, the digest of a preview (the pick, else the first image)."""
    import time

    ids = [r["id"] for r in runs]
    marks = ",".join("?" * len(ids))
    rows: dict[str, dict[str, Any]] = {}
    previews: dict[str, str] = {}
    if ids:
        for r in state.journal.query(
            f"SELECT id, progress, finished_at FROM runs WHERE id IN ({marks})", tuple(ids)
        ):
            rows[r["id"]] = r
        for r in state.journal.query(
            "SELECT run_id, COALESCE(final, raw) AS digest FROM iterations "
            f"WHERE run_id IN ({marks}) AND COALESCE(final, raw) IS NOT NULL "
            "ORDER BY picked DESC, ordinal",
            tuple(ids),
        ):
            previews.setdefault(r["run_id"], r["digest"])
    groups: dict[str, list[dict[str, Any]]] = {}
    now = time.time()
    from ...state.runfold import fold

    folds = fold(state.journal, runs, {r["id"]: r.get("repeat_of") for r in runs})
    for line in folds:  # an unchanged re-apply: folded into the newest run of its result
        run = {**line.run, "repeats": list(line.repeats), "first": line.first}
        row = rows.get(run["id"]) or {}
        progress = loads(row.get("progress")) if row.get("progress") else None
        steps = {"total": 0, "done": 0, "failed": 0, "waiting": 0, "skipped": 0}
        for phase in (progress or {}).values():
            for k in steps:
                steps[k] += int(phase.get(k) or 0)
        end = row.get("finished_at") or (now if run["status"] == "running" else None)
        groups.setdefault(run["pipeline"] or "?", []).append(
            {
                **run,
                "status_words": status_words(run["status"]),
                "duration_s": (end - run["created_at"]) if end and run["created_at"] else None,
                "steps": steps if progress else None,
                "preview": previews.get(run["id"]),
            }
        )
    return [{"pipeline": name, "runs": members} for name, members in groups.items()]
