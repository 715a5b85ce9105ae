"""The no-op fast path: prove that nothing changed without compiling the pipeline.

After an apply that converged (completed, nothing forced, every step cacheable), a fingerprint
records what the run depended on: the pipeline file's bytes, the params given, every input file
with its (size, mtime, ctime, inode) signature (ctime: an mtime can be set back), the config
files that could change providers, the workspace files (by signature: an edit by hand is seen)
and objects that must exist, and each step's key. The next apply with the same arguments checks
that fingerprint with stat calls and one hash of the pipeline file (when the bytes differ, a
parse proves the document is the same: an edit of comments or layout keeps the fingerprint);
when it holds, the run is journaled as fully cached without importing the compiler, jsonschema
or Jinja. Anything it cannot vouch for falls through to the normal path, which is always
correct.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from stat import S_ISLNK
from typing import Any

from ... import __version__
from ...state.filedigest import sha256_file
from . import fastdoc

FORMAT = 12  # 3: workspace files carry their real paths; 4: and their signature and digest;
# 5: the document digest is of the values read (source.data_digest), not of libyaml's events;
# 6: the matches of each glob read; 7: and the keyed digest (engine/plan/fastdoc.py); 8: a forecast
# always (the no-op journals its element keys); 9: the run's params; 10: progress, phase;
# 11: ctime in every file's signature (an mtime set back after a same-size rewrite is seen);
# 12: a for_each's element labels (plan --json names each element as the planner does)
# A signature this close to the recording time may hide a later same-size write (racy-git).
_RACY_NS = 2_000_000_000
# Step types whose apply has side effects beyond their outputs (image records, gates,
# collections), or whose key has a part the fingerprint does not see (finalize: the encoder's
# version). An llm step's extra part, its provider profile, comes from runner.toml only (a
# config file the fingerprint checks) and runner's version.
_NOT_FAST = frozenset({"image", "finalize", "human_gate", "ingest"})
CONFIG_FILES = ("runner.toml", "prompts.lock")
# The digest of a file a key was made of as missing (expr/templates.py ABSENT; not imported:
# the fast path never loads Jinja).
_ABSENT = "absent"


def _tag(pipeline: Path, overrides: dict[str, str], item: str | None) -> str:
    doc = json.dumps([str(pipeline), sorted(overrides.items()), item], sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:24]


def _record_path(state_dir: Path, tag: str) -> Path:
    return state_dir / "converged" / f"{tag}.json"


def _sig(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _changed_ns(sig: list[Any]) -> int:
    """When a signature's file last changed: its ctime, which every write and utime moves (an
    mtime may have been set back to long ago)."""
    return max(int(sig[1]), int(sig[2]))


def _object_sig(path: str) -> list[int] | None:
    """An object's signature, ctime included: objects are never rewritten in place, so a
    changed one means damaged bytes (the full path then hashes it and sets it aside)."""
    try:
        st = os.lstat(path)
    except OSError:  # missing, or its fan-out directory is not one: the full path looks
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _sha256(path: str) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def _config_candidates(root: Path) -> list[str]:
    out: list[str] = []
    for directory in (root, *root.parents):
        out.extend(str(directory / name) for name in CONFIG_FILES)
    return out


def eligible(plan: Any, options: Any) -> bool:
    """Whether a converged run of this plan may be fingerprinted at all."""
    if options.force or options.dry_run or options.resume_run_id or options.kind != "run":
        return False
    for step in plan.steps.values():
        if step.uses in _NOT_FAST or step.cache.value != "use":
            return False
        if step.uses == "read" and read_pattern(step, plan.params) is None:
            return False
        # A `when` is decided on every run and may run a command (exec) whose answer changes.
        # Checks run only after an execution, and a converged run has none to do.
        if step.when is not None:
            return False
    return True


def read_pattern(step: Any, params: dict[str, Any]) -> str | None:
    """The path or glob a `read` step reads when the run's params alone decide it, else None
    (a path from another step's output is known only by running)."""
    from ... import expr as ex

    path = step.args.get("path") if isinstance(step.args, dict) else None
    if isinstance(path, str):
        return path
    if any(r.root != "params" for e in ex.iter_expressions(path) for r in e.refs):
        return None
    try:
        value = ex.evaluate_value(path, {"params": params})
    except Exception:  # an error the run reports: nothing to vouch for
        return None
    return value if isinstance(value, str) else None


def _globs(plan: Any, reads: dict[str, list[str]]) -> dict[str, list[str]] | None:
    """Each glob the `read` steps read, with the files it matched when the run read it (not as
    the disk is now: a file added while later steps ran was not read); None when a read step
    was not resolved in this run, or two saw the same glob differently."""
    from ...source.globs import WILD

    out: dict[str, list[str]] = {}
    for step in plan.steps.values():
        if step.uses != "read":
            continue
        pattern = read_pattern(step, plan.params)
        if pattern is not None and any(c in pattern for c in WILD):
            seen = reads.get(step.id)
            if seen is None or out.setdefault(pattern, seen) != seen:
                return None
    return out


def record(
    state_dir: Path,
    pipeline: Path,
    overrides: dict[str, str],
    item: str | None,
    plan: Any,
    report: Any,
    *,
    began_ns: int | None = None,
) -> None:
    """Write the fingerprint of a converged run (best effort: a failure only costs speed).
    ``began_ns``: when the command began, before the pipeline and config files were read."""
    if report.exit_code != 0 or report.status.value != "completed":
        return
    outcomes = {o.id: o for o in report.steps}
    if set(outcomes) != set(plan.order):
        return  # the forecast, and the no-op's rows per element, need every step's outcome
    globs = _globs(plan, report.reads)
    if globs is None:
        return
    now = time.time_ns()
    real = _RealPaths()
    # [size, mtime_ns, ctime_ns, inode, sha256]: a signature too close to now is checked by
    # content.
    inputs = {p: list(sig) for p, sig in report.inputs.items()}
    root = str(plan.root)
    workspace = {
        path: [*(_sig(path) or [-1, -1, -1, -1]), digest, real(path)]
        for path, digest in (
            (_joined(root, rel), digest) for rel, digest in sorted(report.workspace.items())
        )
    }
    began = min(began_ns or report.started_ns, report.started_ns)
    if not _still_as_used(inputs, workspace, began, now):
        return
    configs = {p: _sig(p) for p in _config_candidates(plan.root)}
    if any(sig is not None and _changed_ns(sig) >= began - _RACY_NS for sig in configs.values()):
        return  # edited as the run began or while it ran: maybe not the bytes it read
    objects = {
        d: _object_sig(f"{state_dir}/objects/{d[:2]}/{d[2:]}")
        for d in sorted(set(report.objects) | set(report.workspace.values()))
    }
    if not _objects_as_verified(objects, report.verified, f"{state_dir}/objects"):
        return
    from ...state.records import dumps

    sha, (document, keyed) = fastdoc.of_plan(plan)
    doc = {
        "format": FORMAT,
        "version": __version__,
        "pipeline": {
            "path": str(pipeline),
            # the bytes the plan was compiled from: an edit made while the run ran is not them
            "sha256": sha,
            "sig": _sig(str(pipeline)),
            # what the parser reads: a comment or layout edit keeps it (engine/plan/fastdoc.py)
            "document": document,
            # and all of it that keys depend on: a description or retries edit keeps this one
            "keyed": keyed,
        },
        "name": plan.name,
        "item": report.item,
        # the run row's params, progress and phase, as the full path records them
        "params": dumps(plan.params),
        "progress": dumps(_progress(plan)),
        "phase": next(
            (plan.steps[s].phase for s in reversed(plan.order) if plan.steps[s].phase), None
        ),
        "inputs": inputs,
        "configs": configs,
        # a new file matching a glob is invisible to the inputs' stat checks: each glob's
        # matches as its read step read them are recorded, and listed again (see check)
        "root": root,
        "globs": globs,
        # path -> [size, mtime_ns, ctime_ns, inode, sha256, real path]: an edit by hand is seen
        # by stat;
        # a directory swapped for a symlink changes the real path (see check)
        "workspace": workspace,
        # every object the run's results name, output files' copies included, with the
        # signature it had when the run hashed or wrote it
        "objects": objects,
        "steps": [o.to_json() for o in report.steps],
        # what `runner plan` says while the fingerprint holds: every step and element cached
        # (and the keys the no-op journals, element by element, as the full path does)
        "forecast": {
            "steps": [
                _forecast_step(plan.steps[s], outcomes[s], report.labels.get(s)) for s in plan.order
            ],
            "max_cost": plan.limits.max_cost,
            "directory": str(plan.directory),
            "file": plan.file.name,
        },
        "recorded_at_ns": now,
    }
    path = _record_path(state_dir, _tag(pipeline, overrides, item))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, doc)


def _joined(root: str, rel: str) -> str:
    """str(Path(root) / rel), without building the Path when ``rel`` is plain already."""
    plain = rel and rel[0] != "/" and rel[-1] != "/" and "//" not in rel
    if plain and "." not in rel.split("/"):  # pathlib drops "." parts; it keeps ".."
        return f"{root}/{rel}" if root != "/" else f"/{rel}"
    return str(Path(root) / rel)


def _still_as_used(
    inputs: dict[str, list[Any]], workspace: dict[str, list[Any]], started_ns: int, now: int
) -> bool:
    """Whether every file the run hashed or wrote still holds the bytes it used, as far as the
    fingerprint can tell. The fingerprint pairs a signature with a digest, and check() trusts
    a signature older than the racy window. A file written during the run, then rewritten
    before the window began (a hand edit while later steps ran, or a same-size rewrite within
    the clock's granularity after it was hashed), would pair its new signature with the old
    digest: such a file is hashed again now, and a difference means no fingerprint (the next
    apply takes the full path, which sees the edit). A file within the window is hashed by
    check() itself; one older than the run was not written by it."""
    written_from = started_ns - _RACY_NS
    racy_before = now - _RACY_NS
    for path, recorded in (*inputs.items(), *workspace.items()):
        digest = recorded[4]
        if written_from <= _changed_ns(recorded) < racy_before and _sha256(path) != digest:
            return False
    return True


def _objects_as_verified(
    objects: dict[str, list[int] | None], verified: dict[str, Any], root: str
) -> bool:
    """Whether each object still has the signature it had when this run verified or wrote it;
    one this process never looked at, or one changed since (damaged), is hashed now. The
    check trusts the recorded signature, so it must be of bytes known to be whole."""
    for d, sig in objects.items():
        if sig is None or tuple(sig) == verified.get(d):
            continue
        if _sha256(f"{root}/{d[:2]}/{d[2:]}") != d:
            return False
    return True


def _progress(plan: Any) -> dict[str, dict[str, int]]:
    """Per phase, every step done: what a converged run's row holds, and a no-op's."""
    out: dict[str, dict[str, int]] = {}
    for sid in plan.order:
        entry = out.setdefault(
            plan.steps[sid].phase or "default",
            {"total": 0, "done": 0, "skipped": 0, "failed": 0, "waiting": 0},
        )
        entry["total"] += 1
        entry["done"] += 1
    return out


def _forecast_step(step: Any, outcome: Any, labels: dict[int, str] | None) -> dict[str, Any]:
    from ...expr.commandscope import confinement_of

    elements = outcome.elements
    doc = {
        "id": outcome.id,
        "uses": step.uses,
        "key": outcome.key,
        "elements": None if elements is None else [e.key for e in elements],
        **confinement_of(step),
    }
    if elements is not None and labels:  # JSON keys are text: an element's index as a string
        doc["labels"] = {str(i): name for i, name in labels.items()}
    return doc


def forget(state_dir: Path, pipeline: Path, overrides: dict[str, str], item: str | None) -> None:
    _record_path(state_dir, _tag(pipeline, overrides, item)).unlink(missing_ok=True)


def forget_pipeline(state_dir: Path, name: str) -> int:
    """Forget every fingerprint of the pipeline called ``name`` (any file, params or item):
    what its runs used changed in the journal (an edit was dropped), where no fingerprint
    looks. Returns how many were forgotten."""
    forgotten = 0
    for path in sorted((state_dir / "converged").glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # unreadable: check() refuses it already
        if isinstance(doc, dict) and doc.get("name") == name:
            path.unlink(missing_ok=True)
            forgotten += 1
    return forgotten


def check(
    state_dir: Path,
    pipeline: Path,
    overrides: dict[str, str],
    item: str | None,
    *,
    remember: bool = True,
) -> dict[str, Any] | None:
    """The fingerprint when everything it names is unchanged, else None. With ``remember``, a
    pipeline edited only in comments or layout has its new bytes written into the fingerprint
    (a plan passes False: it writes nothing). A pipeline edited only in values no key depends
    on comes back with ``doc["validate"]``: the caller checks it against the schema first."""
    path = _record_path(state_dir, _tag(pipeline, overrides, item))
    journal = _sig(f"{state_dir}/journal.db")
    if journal is None or journal[0] == 0:
        return None  # a lost journal: the full path says so (it is not a new project)
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if doc.get("format") != FORMAT or doc.get("version") != __version__:
        return None
    # What the parser read of the recorded bytes: a run that follows (an input changed, the
    # same pipeline) records its fingerprint without parsing the file again.
    named = doc["pipeline"]
    if isinstance(named["sha256"], str) and isinstance(named["document"], str):
        fastdoc.remember(named["sha256"], (named["document"], named["keyed"]))
    try:
        data = pipeline.read_bytes()
    except OSError:
        return None
    sha = hashlib.sha256(data).hexdigest()
    began = time.time_ns()
    racy_before = int(doc["recorded_at_ns"]) - _RACY_NS
    # Racily clean files whose content is checked now, yet changed before ``began``'s racy
    # window: once this check holds, the fingerprint may vouch for them as of ``began`` (see
    # ``_settled``), so the next no-op stats them instead of hashing them again.
    settled = False
    real = _RealPaths()
    sigs: dict[str, list[int] | None] = {}  # a step's output is the next one's input: one stat
    hashed: dict[str, str] = {}  # and one hash, when racily clean
    for p, recorded in doc["workspace"].items():
        # The normal path restores outputs and refuses one reached through a symlink pointing
        # out of the root; a file merely existing there must not vouch for the run.
        sig, where = real.sig_and_path(p)
        sigs[p] = sig
        if sig != recorded[:4] or where != recorded[5]:
            return None
        changed = _changed_ns(recorded)
        if changed >= racy_before:
            if _sha256(p) != recorded[4]:
                return None
            hashed[p] = recorded[4]
            settled = settled or changed < began - _RACY_NS
    for p, recorded in doc["inputs"].items():
        if recorded[4] == _ABSENT:  # a key was made of its absence: it must still be missing
            if os.path.lexists(p):
                return None
            continue
        if (sigs[p] if p in sigs else _sig(p)) != recorded[:4]:
            return None
        # Racily clean: written so close to the recording that a same-size rewrite within the
        # clock's granularity would keep its signature. Compare its content instead.
        changed = _changed_ns(recorded)
        if changed >= racy_before and hashed.get(p) != recorded[4]:  # (not hashed just now)
            if _sha256(p) != recorded[4]:
                return None
            settled = settled or changed < began - _RACY_NS
    for p, sig in doc["configs"].items():
        if _sig(p) != sig:
            return None
    if doc["globs"] and not _same_matches(Path(doc["root"]), doc["globs"]):
        return None
    objects = f"{state_dir}/objects"
    for d, sig in doc["objects"].items():
        if sig is None or _object_sig(f"{objects}/{d[:2]}/{d[2:]}") != sig:
            return None
    if sha != named["sha256"]:
        # Checked last: parsing costs more than the stat calls above.
        document, keyed = fastdoc.of_bytes(data)
        if document is not None and document == named["document"]:
            # Only comments or layout changed: remember these bytes, so the next no-op needs
            # no parse (best effort, as record is).
            if remember:
                named.update(sha256=sha, sig=_sig(str(pipeline)))
                _write(path, _settled(doc, began) if settled else doc)
                settled = False
        elif keyed is not None and keyed == named["keyed"]:
            # Only values no key depends on changed: the caller compiles the pipeline (the new
            # values must be valid), then calls ``validated``.
            doc["validate"] = {"sha256": sha, "document": document}
            settled = False  # not yet known to hold
        else:
            return None
    if settled and remember:
        _write(path, _settled(doc, began))
    return doc


def _settled(doc: dict[str, Any], began: int) -> dict[str, Any]:
    """``doc`` as of a check that began at ``began`` and held: racy git's remedy. Every file
    the fingerprint names had its recorded signature then, and each racily clean one (changed
    within ``_RACY_NS`` of the recording) its recorded content. A file whose signature is older
    than ``began``'s window cannot be rewritten after ``began`` and keep that signature (a
    write moves its ctime to ``began`` or later, less the clock's granularity), so from then on
    its signature vouches for it: the next no-op hashes only what is still within the window
    instead of every file the run wrote in its last two seconds, forever."""
    doc["recorded_at_ns"] = began
    return doc


def validated(
    state_dir: Path,
    pipeline: Path,
    overrides: dict[str, str],
    item: str | None,
    doc: dict[str, Any],
) -> None:
    """The pipeline a check asked to validate (``doc["validate"]``) is valid: its bytes are now
    the fingerprint's, so the next no-op needs neither a parse nor a schema check."""
    new = doc.pop("validate", None)
    if new is None:
        return
    doc["pipeline"].update(sha256=new["sha256"], document=new["document"], sig=_sig(str(pipeline)))
    _write(_record_path(state_dir, _tag(pipeline, overrides, item)), doc)


def _same_matches(root: Path, globs: dict[str, list[str]]) -> bool:
    from ...errors import InvalidPipeline
    from ...source.globs import matches

    try:
        return all(matches(root, pattern) == found for pattern, found in globs.items())
    except (InvalidPipeline, OSError):
        return False


class _RealPaths:
    """os.path.realpath of many files, each directory walked once (paths.real_file), as the
    disk is now: the cache lives for one record or check (the thousand outputs of one out/
    directory share its walk)."""

    def __init__(self) -> None:
        from ...source.paths import real_file

        self._dirs: dict[str, str] = {}
        self._real_file = real_file

    def __call__(self, path: str) -> str:
        return self._real_file(path, self._dir)

    def sig_and_path(self, path: str) -> tuple[list[int] | None, str | None]:
        """``_sig(path)`` and this object's ``(path)``, with one lstat for a file that is not
        a symlink (its lstat is its stat); None, None when it is missing."""
        head, leaf = os.path.split(path)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None, None
        if leaf in ("", ".", "..") or S_ISLNK(st.st_mode):
            return _sig(path), self(path)
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino], os.path.join(
            self._dir(head), leaf
        )

    def _dir(self, head: str) -> str:
        base = self._dirs.get(head)
        if base is None:
            base = self._dirs[head] = os.path.realpath(head)
        return base


def _write(path: Path, doc: dict[str, Any]) -> None:
    try:
        tmp = path.with_suffix(".tmp")
        from ...source import secretmask  # a run's params are recorded here too

        tmp.write_text(json.dumps(secretmask.mask_json(doc)), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
