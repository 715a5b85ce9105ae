"""Which of the last watch cycle's outcomes the next cycle may reuse.

A step is reached by a change when the last run read a changed file for it (``Readers``), or
when it did not complete; the steps a change does not reach are reused if their results still
hold (``HoldCheck``): not edited with `runner edit`, not deleted by gc, every output file as
the result recorded it. Both are asked on the way from a save to its first command, so each
keeps what the cycle before it learnt, only where that is exact. The same look (an lstat of
each output) tells which shell steps' outputs are regular files below the root, which the
apply's check_plan then need not look at again.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..engine.run.outcomes import RunReport, StepOutcome
from ..source.paths import plain_relative

if TYPE_CHECKING:
    from ..engine.run.apply import State
    from ..engine.run.files import FileHasher
    from ..pipeline.compiler import Plan
    from .watchset import DirResolver


class Readers:
    """The reads of a finished run's steps, by the name of the file read: a change to
    ``dir/name`` can only reach the steps that read a path ending in ``name``, so a cycle
    resolves those paths alone (resolving every step's every read was ~5 ms of a 1,000-step
    cycle's start). Made once the run has ended, off the way to the next cycle."""

    def __init__(self, report: RunReport, done: Iterable[str]) -> None:
        self.by_name: dict[str, list[tuple[str, str]]] = {}
        self.odd: list[tuple[str, str]] = []  # paths not ending in a name (".", ".."): any change
        steps = {o.id: o for o in report.steps}
        for sid in done:
            for rel in steps[sid].reads:
                name = os.path.split(rel)[1]
                if name in ("", ".", ".."):
                    self.odd.append((sid, rel))
                else:
                    self.by_name.setdefault(name, []).append((sid, rel))

    def reaching(self, changed: set[str], norm: DirResolver) -> set[str]:
        """The steps that read one of ``changed`` (absolute paths, as ``norm.text`` gives),
        each read resolved as the check over every read did (``DirResolver.text``)."""
        out: set[str] = set()
        for path in changed:
            for sid, rel in self.by_name.get(os.path.basename(path), ()):
                if norm.text(rel) == path:
                    out.add(sid)
        out.update(sid for sid, rel in self.odd if norm.text(rel) in changed)
        return out


class HoldCheck:
    """Whether the last cycle's outcomes still hold (see ``no_longer_hold``). The files of the
    results it read are kept for the next cycle while no other connection wrote the journal
    (SQLite's ``PRAGMA data_version``: a gc, an edit, another apply) and this process wrote no
    result for them (``keep``: only the steps a cycle reused, which record no result)."""

    def __init__(self) -> None:
        self._version: int | None = None
        # (step id, key) -> its latest completed (or partial) result's files (None: none)
        self._files: dict[tuple[str, str], dict[str, str] | None] = {}
        # The shell steps of the last check (``no_longer_hold``, then ``find_outputs``) whose
        # every output check_plan looks at it found as a regular file below the root, no part
        # a symlink (see ``_directory``): check_plan would pass them.
        self.outputs_found: set[str] = set()
        self._outputs: tuple[Plan | None, dict[str, tuple[frozenset[str], frozenset[str]]]] = (
            None,
            {},
        )

    def keep(self, steps: Iterable[str]) -> None:
        """After a cycle: forget every result but those of ``steps`` (the ones it reused)."""
        kept = set(steps)
        self._files = {k: v for k, v in self._files.items() if k[0] in kept}

    def no_longer_hold(
        self,
        state: State,
        plan: Plan,
        done: Mapping[str, StepOutcome],
        run_id: str,
        hasher: FileHasher,
    ) -> set[str]:
        """Steps whose last-cycle outcome a fresh apply would not find as it was: a `runner
        edit` of the step (made or set aside since), a result gc deleted, an output file
        deleted or edited by hand (an apply restores it). ``run_id`` is the last cycle's run,
        which names every result its outcomes stand on. ``hasher`` is left holding the
        signatures of the files it had to read (whose flush lets the next check stat them
        instead)."""
        from ..state.overrides import any_active

        edited = any_active(state.journal, plan.name)
        files = self._read(state, plan, done, run_id)
        root = str(plan.root)
        outputs = self._shell_outputs(plan)
        self.outputs_found = found = set()
        directories: dict[str, bool] = {}

        def holds(outcome: StepOutcome) -> bool:
            regular = True  # every file a regular one, none a symlink
            written: dict[str, str] | None = None
            for key in (outcome.key,) if outcome.elements is None else _keys(outcome):
                written = None if key is None else files.get((outcome.id, key))
                if written is None:
                    return False
                for rel, digest in written.items():
                    try:
                        # (a path as text: a Path each was a third of this check's stats)
                        got, plain = hasher.hash_regular(os.path.join(root, rel), used=False)
                    except OSError:
                        return False
                    if got != digest:
                        return False
                    regular = regular and plain
            provable = outputs.get(outcome.id) if outcome.elements is None else None
            if regular and provable is not None and written is not None:
                checked, heads = provable  # (``written``: a plain step's one result's files)
                below = written.keys() >= checked
                for head in heads:
                    if not below:
                        break
                    below = directories.get(head) or _directory(root, head, directories)
                if below:
                    found.add(outcome.id)
            return True

        return {sid for sid, o in done.items() if sid in edited or not holds(o)}

    def find_outputs(self, plan: Plan, steps: Iterable[str]) -> None:
        """Add to ``outputs_found`` those of ``steps`` (the ones about to run) whose outputs
        check_plan looks at are each a regular file below the root as the disk is now: an
        lstat each, as ``no_longer_hold`` takes of a reused step's files."""
        outputs = self._shell_outputs(plan)
        root = str(plan.root)
        directories: dict[str, bool] = {}
        regular = _Regular(root)
        found = self.outputs_found
        for sid in steps:
            provable = outputs.get(sid)
            if provable is None:
                continue
            checked, heads = provable
            below = True  # (loops, not all() over generators: ~1 us a step of 500)
            for head in heads:
                if not (directories.get(head) or _directory(root, head, directories)):
                    below = False
                    break
            for rel in checked if below else ():
                if not regular.file(rel):
                    below = False
                    break
            if below:
                found.add(sid)

    def _shell_outputs(self, plan: Plan) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """For each shell step whose outputs check_plan looks at are all made of plain names
        (``paths.plain_relative``): those outputs and the directories on their way. Once per
        plan (its params are fixed)."""
        if self._outputs[0] is not plan:
            from ..engine.run.preflight import shell_outputs

            found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
            for sid, step in plan.steps.items():
                if step.uses != "shell":
                    continue
                checked = shell_outputs(step, plan.params)
                if all(plain_relative(rel) for rel in checked):
                    heads = frozenset(h for rel in checked for h in _heads(rel))
                    found[sid] = (frozenset(checked), heads)
            self._outputs = (plan, found)
        return self._outputs[1]

    def _read(
        self, state: State, plan: Plan, done: Mapping[str, StepOutcome], run_id: str
    ) -> dict[tuple[str, str], dict[str, str] | None]:
        """The files of each result ``done`` stands on; only each result's files (reading
        whole results was most of a 1,000-step cycle's start), and only those not known from
        the cycle before. A pair not found does not hold (the step runs again)."""
        from ..state.records import loads

        conn = state.journal.conn
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version != self._version:  # another connection wrote: nothing known holds
            self._version, self._files = version, {}
        files = self._files
        asked = [  # (a plain step's one key without a list and a generator: ~1 ms of 500)
            sid
            for sid, o in done.items()
            if (
                o.key is not None and (sid, o.key) not in files
                if o.elements is None
                else any(k is not None and (sid, k) not in files for k in _keys(o))
            )
        ]
        if asked:
            found: dict[tuple[str, str], dict[str, str]] = {}
            rows = conn.execute(
                _RESULT_FILES, (state.journal.rows_run(run_id), json.dumps(asked), plan.name)
            )
            for sid, key, text in rows:  # (the latest of a pair last)
                # most steps write no file: nothing to parse
                found[(sid, key)] = {} if text is None or text == "{}" else loads(text)
            for sid in asked:
                for key in _keys(done[sid]):
                    if key is not None:
                        files[(sid, key)] = found.get((sid, key))
        return files


def _heads(rel: str) -> list[str]:
    """The directories on the way to ``rel`` below the root: ``a``, ``a/b`` for ``a/b/c``."""
    parts = rel.split("/")
    return ["/".join(parts[:end]) for end in range(1, len(parts))]


class _Regular:
    """Whether ``root/rel`` is a regular file itself (not a symlink), its directory a real one
    (asked first): an lstat, or for a directory many outputs are in one listing of its
    regular files (a system call each cost ~5 us in the watch process, beside its watcher's
    thread: 500 of them were more than check_plan's look they spare)."""

    LIST_AFTER = 16

    def __init__(self, root: str) -> None:
        self.root = root
        self._asked: dict[str, int] = {}
        self._listed: dict[str, frozenset[str]] = {}

    def file(self, rel: str) -> bool:
        head, _, leaf = rel.rpartition("/")
        names = self._listed.get(head)
        if names is None:
            asked = self._asked[head] = self._asked.get(head, 0) + 1
            directory = os.path.join(self.root, head) if head else self.root
            if asked < self.LIST_AFTER:
                try:
                    return stat.S_ISREG(os.lstat(os.path.join(directory, leaf)).st_mode)
                except OSError:
                    return False
            try:
                with os.scandir(directory) as entries:
                    names = frozenset(e.name for e in entries if e.is_file(follow_symlinks=False))
            except OSError:
                names = frozenset()
            self._listed[head] = names
        return leaf in names


def _directory(root: str, head: str, directories: dict[str, bool]) -> bool:
    """Whether ``root/head`` is a directory itself, not a symlink: an lstat, once per check.
    Each directory on the way to an output of plain names one, and the output a regular file,
    its real path is the root's followed by the output's: below the root, not a folder (what
    check_plan's test finds, from the disk as it is, not from resolutions remembered)."""
    ok = directories.get(head)
    if ok is None:
        try:
            ok = stat.S_ISDIR(os.lstat(os.path.join(root, head)).st_mode)
        except OSError:
            ok = False
        directories[head] = ok
    return ok


def _keys(outcome: StepOutcome) -> list[str | None]:
    return [outcome.key] if outcome.elements is None else [e.key for e in outcome.elements]


# The files of the completed (or partial) results of the (step, key) pairs a run named, of the
# steps named (a JSON list).
_RESULT_FILES = (
    "SELECT e.step_id, e.key, e.files FROM executions AS e "
    "JOIN (SELECT DISTINCT step_id, key FROM executions WHERE run_id=? "
    "AND step_id IN (SELECT value FROM json_each(?))) AS r "
    "ON e.step_id = r.step_id AND e.key = r.key "
    "WHERE e.pipeline=? AND e.status IN ('completed','partial') ORDER BY e.id"
)
