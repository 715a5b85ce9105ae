"""Answering an execution without running it: a cached result, a user's edit, the remote cache.

Each answer is journaled (through the recorder) like an execution, and puts back the files the
step wrote when they are missing or were edited by hand (as the step's ``on_edit`` says).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import StepFailure
from ...pipeline.compiler import CompiledStep, Plan
from ...source import paths
from ...state import overrides
from ...state.journal import CachedResult, Journal
from ...state.objects import ObjectStore, is_digest
from .events import EventType
from .files import FileHasher
from .keys import KeyParts, with_reads
from .outcomes import ElementOutcome, StepStatus
from .recorder import Recorder

if TYPE_CHECKING:
    from .remote_link import RemoteLink  # imported by apply only when a remote is configured


class Reuse:
    """What a run reuses; ``objects_used`` and ``workspace_used`` collect what it relied on."""

    def __init__(
        self,
        plan: Plan,
        journal: Journal,
        objects: ObjectStore,
        hasher: FileHasher,
        recorder: Recorder,
    ) -> None:
        self.plan = plan
        self.journal = journal
        self.objects = objects
        self.hasher = hasher
        self.recorder = recorder
        self.workspace_used: dict[str, str] = {}
        self.objects_used: set[str] = set()
        self._real_root: str | None = None
        # step -> the identities of its for_each items now, for a step with edits (override)
        self.present: dict[str, frozenset[str]] = {}

    def _inside_now(self, rel: str) -> Path | None:
        """``paths.inside_now`` below the root, whose own real path is found once per run
        (steps write below the root, never above it; each output's own components are still
        looked at as the disk is now)."""
        if self._real_root is None:
            self._real_root = os.path.realpath(self.plan.root)
        return paths.inside_now(self.plan.root, rel, real_root=self._real_root)

    def usable(self, cached: CachedResult) -> bool:
        """Every object of ``cached`` is present (noted as used when so). A value that is not
        a digest (a damaged record) names nothing: the step runs again, not every apply fails."""
        named = (*cached.artifacts, *cached.files.values())
        usable = all(is_digest(d) and self.objects.has(d) for d in named)
        if usable:
            self.objects_used.update(cached.artifacts)
            self.workspace_used.update(cached.files)
        return usable

    def cached(
        self,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        key: str,
        hit: CachedResult,
        contract: str | None,
    ) -> ElementOutcome:
        """Answer with a usable cached result, its files put back; failed when a restore is
        refused (an output outside the root, or edited with ``on_edit: fail``)."""
        try:
            restored, kept, refused = self.restore_files(step, index, hit.files)
        except StepFailure as exc:
            refused = exc.reason
        if refused is not None:
            self.recorder.emit(EventType.STEP_FAILED, step.id, index, reason=refused)
            self.recorder.failure(step.id, el_index, key, refused, 0)
            return ElementOutcome(el_index, StepStatus.FAILED, key, reason=refused)
        self.recorder.emit(
            EventType.STEP_SKIPPED,
            step.id,
            index,
            reason="cached",
            key=key,
            restored=restored,
        )
        why = "cached" + (f"; restored {', '.join(restored)}" if restored else "")
        report = {"edited_outputs_kept": kept} if kept else None  # gc keeps them
        self.recorder.reused(step.id, el_index, key, hit.output, why, contract, report)
        return ElementOutcome(el_index, StepStatus.CACHED, key, hit.output)

    def override(
        self,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        key: str,
        contract: str | None,
        identity: str | None = None,
    ) -> ElementOutcome | None:
        """A user edit of this element (found by ``identity``, its item's digest) made under
        ``contract``: used, and brought back when it was set aside; an active edit made under
        another contract is set aside (state/overrides.py)."""
        edits = overrides.standing(
            self.journal,
            self.plan.name,
            step.id,
            el_index,
            identity,
            self.present.get(step.id),
        )
        ov = overrides.holding(edits, contract)
        for other in edits:
            if other.status != "active" or other is ov:
                continue
            why = (
                "its contract is missing or invalid"
                if contract is None
                else f"its contract changed ({(other.contract or '')[:16]} -> {contract[:16]})"
            )
            reason = f"user edit #{other.id} set aside: {why}; regenerating"
            overrides.set_aside(self.journal, other.id, reason)
            self.recorder.emit(
                EventType.OVERRIDE_SET_ASIDE, step.id, index, override=other.id, reason=reason
            )
        if ov is None:
            return None
        if ov.status != "active":  # its contract came back: so does the edit
            overrides.revive(self.journal, ov.id)
        self.recorder.emit(EventType.OVERRIDE_USED, step.id, index, override=ov.id)
        self.recorder.emit(EventType.STEP_SKIPPED, step.id, index, reason="edited", key=key)
        self.recorder.reused(step.id, el_index, key, ov.output, f"user edit #{ov.id}", contract)
        return ElementOutcome(el_index, StepStatus.CACHED, key, ov.output)

    async def remote_hit(
        self,
        remote: RemoteLink,
        step: CompiledStep,
        index: int | None,
        el_index: int,
        key: str,
        parts: KeyParts,
        contract: str | None,
    ) -> ElementOutcome | None:
        """The step's result from the remote cache, journaled here as a completed execution
        (so the next apply finds it locally), or None. A step whose body records its reads,
        with none recorded here for these inputs (``parts`` predicted only), is looked up as
        the remote recorded its reads: those files hashed as they are here (recorded.py)."""
        record = await remote.lookup(key)
        if record is None and step.type.records_reads and not parts.recorded:
            names = await remote.recorded_reads(parts.base())
            if names:
                read = with_reads(parts, self.plan.root, self.hasher, dict.fromkeys(names))
                if contract == key:  # no contract: of its own: the key is the contract
                    contract = read.key()
                parts, key = read, read.key()
                record = await remote.lookup(key)
        if record is None:
            return None
        # Checked against the local compile before anything of it is used or restored.
        from . import remote_check  # only with a remote cache: state.remote is ~2 ms to import

        why = await remote_check.problem(step, parts, key, record, self.objects, self.plan.root)
        if why is not None:
            remote.refuse(key, f"step {step.id}: {why}")
            return None
        hit = remote.use(record)
        self.objects_used.update(hit.artifacts)
        self.workspace_used.update(hit.files)
        restored, _kept, refused = self.restore_files(step, index, hit.files)
        if refused is not None:
            raise StepFailure(refused)
        self.recorder.emit(
            EventType.STEP_SKIPPED,
            step.id,
            index,
            reason="cached (remote)",
            key=key,
            restored=restored,
        )
        sizes = {d: self.objects.size(d) for d in hit.artifacts}
        self.recorder.fetched(
            step.id,
            el_index,
            key,
            parts,
            contract,
            output=hit.output,
            artifacts=hit.artifacts,
            sizes=sizes,
            files=hit.files,
            report=hit.report,
        )
        return ElementOutcome(el_index, StepStatus.CACHED, key, hit.output)

    def restore_files(
        self, step: CompiledStep, index: int | None, files: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str], str | None]:
        """Put back missing outputs, and outputs edited by hand (checked by content, with the
        journal's stat shortcut) as the step's ``on_edit`` says. Returns (restored files,
        {file: object digest of the kept edit}, the reason to fail or None)."""
        restored: list[str] = []
        kept: dict[str, str] = {}
        for rel, digest in files.items():
            # Resolved now, not from compile time: an earlier step may have swapped a directory
            # on the path for a symlink pointing out of the root.
            path = self._inside_now(rel)
            if path is None:
                raise StepFailure(
                    f"cached output {rel} now lies outside the root (a directory on its path is "
                    "a symlink pointing out); not restored"
                )
            try:
                now = self.hasher.hash(path)
            except FileNotFoundError:
                self.objects.restore(digest, path)
                restored.append(rel)
                continue
            if now == digest:
                continue
            if self.runners_own(rel, now):
                # runner's own bytes (another result of the step: its inputs changed, then
                # back; or one whose records gc deleted), as keep_before_rerun says, not a hand
                # edit: the recorded output goes back whatever on_edit says, and nothing is
                # lost (the store has these bytes, or gc was asked to forget them)
                self.objects.restore(digest, path)
                self.hasher.forget(path)
                restored.append(rel)
                continue
            where = f"{rel} was edited by hand ({digest[:12]} -> {now[:12]})"
            if step.on_edit == "fail":
                return restored, kept, f"{where}; on_edit: fail leaves it for you to resolve"
            if step.on_edit == "keep":
                self.recorder.emit(EventType.OUTPUT_EDITED, step.id, index, file=rel, action="kept")
                continue
            kept[rel] = self._keep_edit(step, index, rel, path, "restored")
            self.objects.restore(digest, path)
            self.hasher.forget(path)
            restored.append(rel)
        return restored, kept, None

    def runners_own(self, rel: str, digest: str) -> bool:
        """Whether an output's bytes are runner's, not a hand edit: a stored object (a result
        of some step), or what a run whose records gc deleted wrote there (state/written.py)."""
        if self.objects.has(digest):
            return True
        from ...state import written  # only for bytes in no object: rare

        return written.runner_wrote(self.journal, rel, digest)

    def _keep_edit(
        self, step: CompiledStep, index: int | None, rel: str, path: Path, action: str
    ) -> str:
        """Store a hand-edited output's bytes (they are never destroyed) and say where;
        returns their object digest."""
        edited = self.objects.put_file(path)
        self.recorder.emit(
            EventType.OUTPUT_EDITED,
            step.id,
            index,
            file=rel,
            action=action,
            edited=edited,
            kept_at=str(self.objects.path(edited)),
        )
        return edited

    def keep_before_rerun(
        self, step: CompiledStep, index: int | None, args: Mapping[str, object]
    ) -> tuple[dict[str, str], str | None]:
        """Before ``step`` runs and writes its outputs again: each output file whose bytes are
        not runner's own (edited by hand, or made outside runner) is kept in the store first,
        and said where, as a restore keeps it; ``on_edit: fail`` fails the step instead.
        Returns ({file: object digest of the kept bytes}, the reason to fail or None)."""
        edited = self.edited_before_rerun(step, args)
        if edited and step.on_edit == "fail":
            return {}, rerun_refused(edited[0][0])
        kept = {
            rel: self._keep_edit(step, index, rel, path, "kept before re-run")
            for rel, path in edited
        }
        return kept, None

    def edited_before_rerun(
        self, step: CompiledStep, args: Mapping[str, object]
    ) -> list[tuple[str, Path]]:
        """The output files ``step`` would write again whose bytes are not runner's own (no
        stored object, nothing gc forgot): (path relative to the root, path). Reads only, so
        the planner asks it too (with its own hasher)."""
        edited: list[tuple[str, Path]] = []
        for rel in step.type.produces(args):
            if not os.path.lexists(os.path.join(self.plan.root, rel)):
                continue  # nothing there by any way (one lstat; a first run's usual case)
            path = self._inside_now(rel)
            if path is None or not path.is_file():
                continue  # missing (nothing to lose), or refused by the step itself
            try:
                now = self.hasher.hash(path, used=False)  # the step writes it again next
            except OSError:
                continue
            if not self.runners_own(rel, now):
                edited.append((rel, path))
        return edited


def rerun_refused(rel: str) -> str:
    """Why a step with ``on_edit: fail`` does not run over its output ``rel`` edited by hand."""
    return (
        f"{rel} was edited by hand and the step would write it again; "
        "on_edit: fail leaves it for you to resolve"
    )
