"""Output files that no longer hold what the journal recorded (`runner verify`).

For every pipeline the journal knows, the outputs of its latest converged run (or of a later run
that wrote them again) are compared with the digests their executions recorded: an output edited
by hand is a problem (the next apply keeps the edited bytes in the object store and restores the
recorded output, unless the step's ``on_edit`` says otherwise); a missing one is only a note (the
next apply restores it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..run.files import FileHasher


@dataclass
class Drift:
    pipeline: str
    run_id: str
    step: str
    element: int
    file: str  # relative to the pipeline's root
    recorded: str
    found: str | None  # None: the file is missing

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "run": self.run_id,
            "step": self.step,
            "element": self.element,
            "file": self.file,
            "recorded": self.recorded,
            "found": self.found,
        }

    def __str__(self) -> str:
        el = f"[{self.element}]" if self.element >= 0 else ""
        if self.found is None:
            return f"{self.file} ({self.pipeline} {self.step}{el}) is missing: apply restores it"
        return (
            f"{self.file} ({self.pipeline} {self.step}{el}) was edited by hand "
            f"({self.recorded[:12]} -> {self.found[:12]}): apply keeps the edit in the store "
            "and restores the recorded output"
        )


def _root_of(pipeline_file: str) -> Path | None:
    """The directory a pipeline's output paths are relative to (its ``root:``), or None."""
    from ...errors import InvalidPipeline
    from ...source.document import parse_file

    path = Path(pipeline_file)
    try:  # read as the compiler reads it (YAML 1.2, bounded size and aliases), not safe_load
        data = parse_file(path).data
    except InvalidPipeline:
        return None
    root = data.get("root", ".") if isinstance(data, dict) else "."
    return (path.parent / str(root)).resolve()


def output_drift(journal: Any) -> list[Drift]:
    """Every output of each pipeline's latest completed run that is missing or edited; a file
    a later run of the same pipeline and item wrote again (one waiting at a gate, rejected,
    failed further on) is compared with what that run recorded."""
    latest = journal.query(
        "SELECT r.id, r.pipeline, r.pipeline_file, r.created_at FROM runs r "
        "WHERE r.status<>'running' "
        "AND r.created_at >= (SELECT MAX(created_at) FROM runs q WHERE q.pipeline=r.pipeline "
        "AND q.item IS r.item AND q.status='completed')"
    )
    hasher = FileHasher(journal)
    # One file may be written by several items' runs (or pipelines): the newest one decides.
    newest: dict[Path, tuple[dict[str, Any], dict[str, Any], str, str]] = {}
    for run in sorted(latest, key=lambda r: r["created_at"] or 0):
        root = _root_of(run["pipeline_file"] or "")
        if root is None:
            continue
        rows = journal.query(
            "SELECT e.step_id, e.element, "
            "(SELECT c.files FROM executions c WHERE c.pipeline=e.pipeline AND c.step_id="
            "e.step_id AND c.key=e.key AND c.status='completed' AND c.files IS NOT NULL "
            "ORDER BY c.id DESC LIMIT 1) AS files "
            "FROM executions e WHERE e.run_id=? AND e.status IN ('completed','cached') "
            "ORDER BY e.id",
            (journal.rows_run(run["id"]),),
        )
        for row in rows:
            for rel, digest in (json.loads(row["files"] or "{}") or {}).items():
                newest[root / rel] = (run, row, rel, digest)
    out: list[Drift] = []
    for path, (run, row, rel, digest) in newest.items():
        try:
            found: str | None = hasher.hash(path)
        except FileNotFoundError:
            found = None
        if found != digest:
            out.append(
                Drift(
                    run["pipeline"], run["id"], row["step_id"], row["element"], rel, digest, found
                )
            )
    return out
