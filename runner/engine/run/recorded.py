"""Reads recorded, not predicted: the files a step's body read, in its key.

A step type's ``reads()`` predicts its inputs from its arguments; some reads only the body can
know (a template's ``{% include "parts/" ~ tone ~ ".j2" %}``). A type with ``records_reads``
returns what it read (``StepResult.reads``, name -> sha256 of the bytes read), and the
execution is journaled under the key of its predicted parts *and* those files with those
digests (``KeyParts.recorded``), its key parts naming its base key (every part but the recorded
files) and the names recorded.

The next apply computes the base key, finds the names the latest execution with that base
recorded, hashes those files as they are now and adds them: an unchanged file gives the same
key (reused), an edited one another (the step runs, and records again). A run whose body reads
other files than predicted is journaled under the key of what it did read, which is what a
fresh run of the same inputs journals: the names are only ever a guess of which files to
hash, the key is always of the files read.

Every recorded file is hashed through the run's FileHasher, the one list of files keys name,
which the no-op fingerprint (engine/plan/fastpath.py) is made of.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...source.beneath import OutsideRoot
from ...source.regularfile import NotRegularFile
from ...state.journal import Journal
from ...steps.base import StepResult
from .files import FileHasher
from .keys import KeyParts, with_reads

_RECORDED = (
    "SELECT key_parts FROM executions WHERE pipeline=? AND step_id=? "
    "AND status IN ('completed', 'partial') AND key_parts LIKE '%\"recorded\"%' ORDER BY id"
)


class RecordedReads:
    """base key -> the names its latest execution recorded, per step, read from the journal
    once per step and run (a for_each's elements share one query)."""

    def __init__(self, journal: Journal | None, pipeline: str) -> None:
        self.journal = journal
        self.pipeline = pipeline
        self._steps: dict[str, dict[str, tuple[str, ...]]] = {}

    def _table(self, step_id: str) -> dict[str, tuple[str, ...]]:
        table = self._steps.get(step_id)
        if table is None:
            table = self._steps[step_id] = {}
            if self.journal is not None:
                for (text,) in self.journal.conn.execute(_RECORDED, (self.pipeline, step_id)):
                    try:
                        doc = json.loads(text)
                    except (TypeError, ValueError):
                        continue  # a damaged row names nothing: the step runs and records
                    base, names = doc.get("base"), doc.get("recorded")
                    if isinstance(base, str) and isinstance(names, list):
                        table[base] = tuple(n for n in names if isinstance(n, str))
        return table

    def names(self, step_id: str, base: str) -> tuple[str, ...] | None:
        """What the latest execution of ``step_id`` with base key ``base`` recorded reading
        (None: no execution with that base recorded anything)."""
        return self._table(step_id).get(base)

    def settle(
        self,
        step_id: str,
        parts: KeyParts,
        result: StepResult,
        root: Path,
        hasher: FileHasher,
    ) -> tuple[KeyParts, str | None]:
        """The key parts of what an execution's body did read: ``parts`` (as predicted) with
        the body's recorded reads and their digests as read, and the first recorded file whose
        bytes are not those any more (it changed while the body ran: the result is not kept
        for its key), else None. Each is hashed now through ``hasher``: the no-op fingerprint
        lists what a key names."""
        from ...expr.templates import ABSENT  # a template step's: jinja2 is loaded already

        settled = with_reads(parts, root, hasher, result.reads)
        moved: str | None = None
        for rel in settled.recorded or ():
            try:
                now = hasher.hash(root / rel, root=root)
            except FileNotFoundError:
                now = ABSENT
                hasher.absent(root / rel, ABSENT)
            except (OutsideRoot, NotRegularFile):
                now = "refused"
            if now != settled.files[rel] and moved is None:
                moved = rel
        self._table(step_id)[settled.base()] = settled.recorded or ()
        return settled, moved
