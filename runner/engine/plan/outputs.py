"""What an apply would do with a step's output files that no longer hold what was recorded,
told without writing anything: reuse.py's ``restore_files`` (a cached result's outputs put back,
kept, or the step failed, as ``on_edit`` says) and ``keep_before_rerun`` (``on_edit: fail``
refuses to run over an output edited by hand)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...pipeline.compiler import CompiledStep
from ..run.reuse import Reuse, rerun_refused
from .forecast import Action
from .unknowns import ArgReader, PlanHasher, Touched


def cached_outputs(
    step: CompiledStep, files: Mapping[str, str], reuse: Reuse, hasher: PlanHasher
) -> tuple[Action, list[str]] | None:
    """For a cached result whose ``files`` (path -> recorded digest) differ from the disk:
    RESTORE (missing, runner's own other bytes, or a hand edit kept in the store and put back),
    CACHED (a hand edit left as is, ``on_edit: keep``) or FAIL (a hand edit, ``on_edit:
    fail``), with the reasons; None when every file holds what was recorded. Files the apply
    would put back hash to their recorded digest for the steps after (``hasher.overlay``)."""
    action, reasons = Action.CACHED, []
    for rel, digest in files.items():
        path = reuse.plan.root / rel
        try:
            now = hasher.actual(path)
        except FileNotFoundError:
            now = None
        except OSError as exc:
            hasher.overlay[str(path)] = digest
            action = Action.RESTORE
            reasons.append(f"output {rel} cannot be read ({exc.strerror}): would restore it")
            continue
        if now == digest:
            hasher.overlay[str(path)] = digest
            continue
        if now is None:
            reasons.append(f"output {rel} is missing: would restore it from the store")
        elif reuse.runners_own(rel, now):
            # another result's bytes, put back by a revert of the inputs, or bytes of a run
            # whose records gc deleted (reuse.py)
            reasons.append(f"output {rel} holds another result of the step: would restore it")
        else:
            edit = f"output {rel} was edited by hand ({digest[:12]} -> {now[:12]})"
            if step.on_edit == "fail":
                return Action.FAIL, [f"{edit}: on_edit: fail would fail the step"]
            if step.on_edit == "keep":
                reasons.append(f"{edit}: would leave it as is (on_edit: keep)")
                continue  # the steps after read the edited bytes
            reasons.append(
                f"{edit}: would keep the edited bytes in the store and restore the recorded output"
            )
        hasher.overlay[str(path)] = digest
        action = Action.RESTORE
    return (action, reasons) if reasons else None


def unknown_fails(step: CompiledStep, ctx: Mapping[str, Any], reuse: Reuse) -> str | None:
    """For an element whose key is not known yet (it reads an upstream that would run): why it
    fails all the same, or None. With ``on_edit: fail`` an output edited by hand fails it
    whether it is then answered from the cache (the recorded bytes differ) or runs again: the
    outputs named by the arguments that are known already (a literal ``outputs:``) are
    looked at."""
    if step.on_edit != "fail" or not isinstance(step.args, Mapping):
        return None
    reader = ArgReader(step, dict(ctx), None)
    known = {name: reader.get(name) for name in step.args}
    try:
        return rerun_fails(step, known, reuse)
    except Exception:  # arguments a type cannot name its outputs from yet: not known
        return None


def rerun_fails(step: CompiledStep, args: Mapping[str, Any], reuse: Reuse) -> str | None:
    """Why a step that would run fails first instead (an output it writes again was edited by
    hand, ``on_edit: fail``), or None. An output an earlier step would write again is not
    known yet: not counted."""
    if step.on_edit != "fail":
        return None
    try:
        edited = reuse.edited_before_rerun(step, args)
    except Touched:
        return None
    return f"would fail: {rerun_refused(edited[0][0])}" if edited else None
