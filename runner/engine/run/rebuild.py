"""`runner verify --rebuild`: run cached executions again, in a scratch copy, and compare.

A step whose key matched was trusted to give what it gave before; this checks that trust (as
Nix's ``--check`` does): each chosen execution of the latest runs is run again and its output,
objects and files are compared with the recorded ones. A difference means the step is not
deterministic (a command that reads the clock, a provider that ignores its seed).

Nothing of the real state changes. Each run is rebuilt in a temporary directory holding a copy
of the project folder (the one holding the pipeline file, its root and runner.toml; the state,
VCS and virtualenv folders and the run's own output files left out) and a state of its own (an
empty journal; an object store that reads missing objects from the real one, hash-checked, and
writes only to itself). The recorded output files of the steps upstream of the checked ones are
put in the copy from the store, and each execution sees the recorded outputs of the steps before
it: it is checked alone, against its recorded inputs (the interpreter's own preparation and
attempts run it, forced past the cache). Its key is worked out again in the copy; when it is not
the recorded one (the project changed since), the execution is skipped, not compared. Checks run
one after another.

Provider steps are not re-paid unless asked (``include_paid``): a step type calls providers when
it is one the planner prices (``planner.CALL_STEPS``) or declares ``calls_provider = True``; a
third-party type that declares neither that nor ``runs_anywhere`` (a body needing nothing but
its arguments) is counted as paid. Gates (a person's decision), types whose effect is state
outside the object store (``shareable = False``), user edits and ``cache: false`` steps are
listed as skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import expr as ex
from ...errors import RunnerError, UsageError
from ...state.journal import RUN_COLUMNS, CachedResults, Journal
from ...state.objects import ObjectStore
from ...state.records import loads
from .apply import run_async
from .rebuild_report import Check, RebuildReport, Verdict, compare

DEFAULT_SAMPLE = 10
# Left out of the copy: the state itself, version control, environments and caches.
SKIPPED_DIRS = frozenset(
    {".runner", ".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__",
     ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)  # fmt: skip
# Output fields that tell how a result was obtained, not what it is: not compared. An llm reply
# or image answered by the call ledger says ``reused``; an image's ``metadata`` is the backend's
# account of the job (ComfyUI's prompt id and file name change with every job). The image bytes
# and the reply text are compared.
BOOKKEEPING = frozenset(
    {("reused",), ("iterations", "*", "reused"), ("iterations", "*", "metadata")}
)

Progress = Callable[[int, int, str], None]  # (done, total, what is being rebuilt)


@dataclass
class Recorded:
    """One execution as the run recorded it."""

    step: str
    element: int | None
    key: str
    output: Any
    artifacts: list[str]
    files: dict[str, str]
    why: str


def latest_runs(journal: Journal, run_id: str | None = None) -> list[dict[str, Any]]:
    """The runs to rebuild: ``run_id`` (a unique prefix will do; NotFound when unknown), else
    the latest finished run of each (pipeline, item)."""
    if run_id is not None:
        return [journal.get_run(run_id)]
    seen: set[tuple[str, str | None]] = set()
    out: list[dict[str, Any]] = []
    for row in journal.query(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE status != 'running' "
        "ORDER BY created_at DESC, rowid DESC"
    ):
        where = (row["pipeline"], row["item"])
        if where not in seen:
            seen.add(where)
            out.append(row)
    return out


def calls_provider(name: str, step_type: Any) -> bool:
    """Whether running this step type may pay a provider (see the module's docstring)."""
    declared = getattr(step_type, "calls_provider", None)
    if isinstance(declared, bool):
        return declared
    from ..plan.planner import CALL_STEPS

    if name in CALL_STEPS:
        return True
    builtin = type(step_type).__module__.startswith("runner.steps.")
    return not builtin and not getattr(step_type, "runs_anywhere", False)


def recorded_executions(journal: Journal, run: dict[str, Any]) -> list[Recorded]:
    """The run's completed (or cached) executions with their recorded results, one per step
    and element (a resumed run's last word)."""
    results = CachedResults(journal.conn, run["pipeline"])
    latest: dict[tuple[str, int], Recorded] = {}
    for row in journal.query(
        "SELECT step_id, element, key, status, output, artifacts, files, why FROM executions "
        "WHERE run_id=? AND status IN ('completed','cached') AND key IS NOT NULL ORDER BY id",
        (journal.rows_run(run["id"]),),
    ):
        el = row["element"]
        element = None if el is None or el < 0 else int(el)
        why = row["why"] or ""
        if row["status"] == "completed":
            output, artifacts = loads(row["output"]), loads(row["artifacts"]) or []
            files = loads(row["files"]) or {}
        else:
            hit = results.get((row["step_id"], row["key"]))
            if hit is None or hit.status != "completed":
                continue  # its result is gone (gc): nothing recorded to compare with
            output, artifacts, files = hit.output, hit.artifacts, hit.files
            if row["output"] is not None:  # a user edit's row carries the edited output
                output = loads(row["output"])
        latest[(row["step_id"], -1 if element is None else element)] = Recorded(
            row["step_id"], element, row["key"], output, artifacts, files, why
        )
    return list(latest.values())


def rebuild(
    state: Any,
    *,
    run_id: str | None = None,
    sample: int | None = DEFAULT_SAMPLE,
    include_paid: bool = False,
    progress: Progress | None = None,
    seed: int | None = None,
) -> RebuildReport:
    """Rebuild a sample (``sample`` None: all) of the cached executions of the latest runs
    (or of ``run_id``) and compare them with what was recorded. ``state`` is the real state,
    read only. Raises NotFound for an unknown run."""
    report = RebuildReport()
    runs = latest_runs(state.journal, run_id)
    plans: list[tuple[dict[str, Any], list[Recorded], Any]] = []
    eligible: list[tuple[int, Recorded]] = []
    for run in runs:
        report.runs.append({"id": run["id"], "pipeline": run["pipeline"], "item": run["item"]})
        recorded = recorded_executions(state.journal, run)
        plan, skipped = _classify(run, recorded, include_paid)
        report.checks.extend(skipped)
        picked = {(c.step, c.element) for c in skipped}
        for rec in recorded:
            if (rec.step, rec.element) not in picked:
                eligible.append((len(plans), rec))
        plans.append((run, recorded, plan))
    chosen = eligible
    if sample is not None and len(eligible) > sample:
        chosen = random.Random(seed).sample(eligible, sample)
        report.not_sampled = len(eligible) - sample
    total, done = len(chosen), 0
    for i, (run, recorded, plan) in enumerate(plans):
        mine = [rec for j, rec in chosen if j == i]
        if not mine or plan is None:
            continue
        if progress is not None:  # a big project takes a while to copy
            progress(done, total, f"{run['pipeline']}: copying the project")
        try:
            with _Scratch.made(state, run, plan, recorded) as scratch:
                report.checks.extend(run_async(scratch.check_all(mine, progress, done, total)))
        except (RunnerError, OSError) as exc:  # no scratch copy: these were not checked
            reason = f"no scratch copy of the project could be made: {exc}"
            for rec in mine:
                uses = plan.steps[rec.step].uses
                report.checks.append(
                    Check(run["id"], run["pipeline"], rec.step, rec.element, uses,
                          Verdict.FAILED, reason)
                )  # fmt: skip
        done += len(mine)
    if progress is not None and total:
        progress(total, total, "done")
    order = {r["id"]: n for n, r in enumerate(report.runs)}
    report.checks.sort(
        key=lambda c: (order.get(c.run_id, 0), c.step, -1 if c.element is None else c.element)
    )
    return report


def _label(rec: Recorded) -> str:
    return rec.step + (f"[{rec.element}]" if rec.element is not None else "")


def _classify(
    run: dict[str, Any], recorded: list[Recorded], include_paid: bool
) -> tuple[Any, list[Check]]:
    """The run's pipeline compiled as it ran (None when it cannot be) and the executions that
    are not rebuilt, each with why."""
    from ...pipeline.compiler import CachePolicy
    from .gatestep import is_gate

    def skip(rec: Recorded, uses: str, reason: str) -> Check:
        return Check(
            run["id"], run["pipeline"], rec.step, rec.element, uses, Verdict.SKIPPED, reason
        )

    try:
        plan = _compile(Path(run["pipeline_file"]), run)
    except (RunnerError, OSError) as exc:
        reason = f"its pipeline does not compile as it ran: {exc}"
        return None, [skip(rec, "?", reason) for rec in recorded]
    out: list[Check] = []
    for rec in recorded:
        step = plan.steps.get(rec.step)
        if step is None:
            out.append(skip(rec, "?", "the pipeline no longer has this step"))
        elif is_gate(step):
            out.append(skip(rec, step.uses, "a person's decision, not a computation"))
        elif not step.type.shareable:
            out.append(skip(rec, step.uses, "its effect is state outside the object store"))
        elif rec.why.startswith("user edit"):
            out.append(skip(rec, step.uses, f"its output is a {rec.why} (runner edit)"))
        elif step.cache is not CachePolicy.USE:
            out.append(skip(rec, step.uses, "cache: false (never reused, so not checked)"))
        elif calls_provider(step.uses, step.type) and not include_paid:
            out.append(skip(rec, step.uses, "calls a provider (paid): see --include-paid"))
    return plan, out


def _compile(file: Path, run: dict[str, Any]) -> Any:
    """The run's pipeline with the run's params. Raises RunnerError."""
    import json

    from ...pipeline.compiler import compile_pipeline

    if not file.is_file():
        raise UsageError(f"the pipeline file {file} no longer exists")
    params = loads(run["params"]) or {}
    return compile_pipeline(file, {k: json.dumps(v) for k, v in params.items()})


def _read_verified(path: str, digest: str) -> bytes | None:
    """An object's bytes when whole; None when missing or damaged. Never moves anything (the
    real store's damaged objects are `runner verify`'s to report, not this one's to set aside)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == digest else None


class _Overlay(ObjectStore):
    """The scratch object store: an object it lacks is copied from the real store (checked)
    the first time it is asked for, so steps read recorded results; writes stay here."""

    def __init__(self, root: Path, real: ObjectStore) -> None:
        super().__init__(root)
        self.real = real

    def _file(self, digest: str) -> str:
        target = super()._file(digest)
        if not os.path.exists(target):
            data = _read_verified(self.real._file(digest), digest)
            if data is not None:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(data)
        return target


class _Scratch:
    """One run's scratch project copy, state and interpreter."""

    def __init__(
        self, state: Any, run: dict[str, Any], real_plan: Any, tmp: Path, recorded: list[Recorded]
    ) -> None:
        from ...providers.config import find_config
        from .apply import _LazyProviders
        from .gatestep import load_reviews
        from .interpreter import Interpreter
        from .options import ApplyOptions
        from .recorded import RecordedReads

        self.run, self.real_objects = run, state.objects
        real_file = Path(run["pipeline_file"]).resolve()
        anchors = [real_plan.root.resolve(), real_file.parent]
        config = find_config(real_plan.root)
        if config is not None:
            anchors.append(config.resolve().parent)
        base = Path(os.path.commonpath(anchors))
        # One of them holds the others (the project folder), and not a whole home or disk:
        # the copy is of the project, never of whatever folder happens to hold its parts.
        if base not in anchors or base == Path(base.anchor) or Path.home().is_relative_to(base):
            raise UsageError(
                f"the pipeline file, its root and runner.toml lie in no one project folder "
                f"(only {base} holds them all): it is not copied"
            )
        self.tree = tmp / "project"
        self.real_root = str(real_plan.root.resolve())
        # The run's outputs are not copied: those the checked steps read are put back from the
        # store (the project's may have been edited since).
        outputs = {
            os.path.normpath(os.path.join(self.real_root, rel))
            for rec in recorded
            for rel in rec.files
        }
        _copy_tree(base, self.tree, state.dir.resolve(), outputs)
        self.plan = _compile(self.tree / real_file.relative_to(base), run)
        self.root = str(self.plan.root)
        self.recorded = recorded
        self.journal = Journal.open(tmp / "state")
        self.objects = _Overlay(tmp / "state" / "objects", state.objects)
        self.providers = _LazyProviders(self.plan.root)
        options = ApplyOptions(
            jobs=1, item=run["item"], run_id=run["id"], force=frozenset(self.plan.steps)
        )
        self.interp = Interpreter(
            self.plan,
            journal=self.journal,
            objects=self.objects,
            state_dir=tmp / "state",
            options=options,
            providers=self.providers,
        )
        # A revision's reviewer input is part of the revised step's key and arguments.
        self.interp.reviews.update(load_reviews(real_plan, state.journal, run["id"]))
        # What bodies recorded reading is in the real journal: the copy's keys hash those files
        # (in the copy) as the run's did, so a template's computed include is not "stale".
        self.interp.recorded = RecordedReads(state.journal, self.plan.name)

    @classmethod
    @contextlib.contextmanager
    def made(
        cls, state: Any, run: dict[str, Any], real_plan: Any, recorded: list[Recorded]
    ) -> Iterator[_Scratch]:
        tmp = Path(tempfile.mkdtemp(prefix="runner-rebuild-"))
        scratch = None
        try:
            scratch = cls(state, run, real_plan, tmp, recorded)
            yield scratch
        finally:
            if scratch is not None:
                scratch.journal.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def _put_back(self, recorded: list[Recorded]) -> None:
        """The recorded output files in the copy, as the run left them (read from the real
        store, checked; a lost object leaves its file out)."""
        for rec in recorded:
            for rel, digest in rec.files.items():
                target = self._inside(rel)
                data = _read_verified(self.real_objects._file(digest), digest)
                if target is not None and data is not None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.unlink(missing_ok=True)  # a link left by the copy is not followed
                    target.write_bytes(data)

    def _inside(self, rel: str) -> Path | None:
        target = Path(os.path.normpath(os.path.join(self.root, rel)))
        return target if str(target).startswith(self.root + os.sep) else None

    async def check_all(
        self,
        mine: list[Recorded],
        progress: Progress | None,
        done: int,
        total: int,
    ) -> list[Check]:
        """Rebuild ``mine`` one after another (one event loop for the run's checks), the copy
        holding the run's recorded files and each step seeing the run's recorded results."""
        upstream = _upstream(self.plan, {rec.step for rec in mine})
        self._put_back([rec for rec in self.recorded if rec.step in upstream])
        self.interp.context_steps.update(_context(self.plan, self.recorded))
        out: list[Check] = []
        try:
            for n, rec in enumerate(mine):
                if progress is not None:
                    progress(done + n, total, f"{self.run['pipeline']}: {_label(rec)}")
                out.append(await self.check(rec))
        finally:
            await self.providers.aclose()  # their connections, kept open for the checks
        return out

    async def check(self, rec: Recorded) -> Check:
        step = self.plan.steps[rec.step]
        made = Check(self.run["id"], self.run["pipeline"], rec.step, rec.element, step.uses,
                     Verdict.SAME)  # fmt: skip
        for rel in rec.files:  # made again from nothing, as a first apply would
            target = self._inside(rel)
            if target is not None:
                target.unlink(missing_ok=True)
        try:
            rebuilt = await self._run(step, rec)
        except RunnerError as exc:
            made.verdict, made.reason = Verdict.FAILED, str(exc)
            return made
        finally:  # the steps checked after this one read what was recorded, not the rebuild
            self._put_back([rec])
        if isinstance(rebuilt, str):
            stale = rebuilt.startswith("stale: ")
            made.verdict = Verdict.SKIPPED if stale else Verdict.FAILED
            made.reason = rebuilt.removeprefix("stale: ")
            return made
        output, artifacts, files = rebuilt
        theirs = (_comparable(rec.output), rec.artifacts, rec.files)
        mine = (_comparable(_relocated(output, self.root, self.real_root)), artifacts, files)
        made.differences = compare(theirs, mine, self._read)
        if made.differences:
            made.verdict = Verdict.DIFFERS
        return made

    def _read(self, digest: str, rebuilt: bool) -> bytes | None:
        store = self.objects if rebuilt else self.real_objects
        return _read_verified(os.path.join(store.root, digest[:2], digest[2:]), digest)

    async def _run(self, step: Any, rec: Recorded) -> tuple[Any, list[str], dict[str, str]] | str:
        """The execution run again: (output, artifacts, files), or why it could not be."""
        interp = self.interp
        index, item, has_item = rec.element, None, step.for_each is not None
        if has_item:
            items = ex.evaluate_value(step.for_each, interp._context())
            if isinstance(items, dict):
                items = list(items.items())
            if not isinstance(items, list) or index is None or index >= len(items):
                return "stale: its for_each no longer has this element"
            item = items[index]
        # The interpreter's own preparation and attempts (arguments, key, checks, retries with
        # feedback), forced past the cache: the execution is what an apply would run.
        ready = interp._prepare(step, index, item, has_item=has_item)
        if not isinstance(ready, tuple):
            return f"its arguments cannot be worked out: {ready.reason}"
        if ready[4] != rec.key:
            return (
                f"stale: its key is no longer the recorded one ({rec.key[:12]} -> "
                f"{ready[4][:12]}): the project changed since the run; apply, then rebuild"
            )
        outcome = await interp._execution(step, index, item, has_item=has_item, ready=ready)
        interp.recorder.flush_deferred()
        interp.recorder.write_held()
        if not outcome.status.succeeded:
            return f"the step failed where it once passed: {outcome.reason}"
        row = self.journal.query(
            "SELECT output, artifacts, files FROM executions WHERE step_id=? AND element=? "
            "AND status='completed' ORDER BY id DESC LIMIT 1",
            (step.id, -1 if index is None else index),
        )
        if not row:
            return "the rebuild recorded no result"
        return (
            loads(row[0]["output"]),
            loads(row[0]["artifacts"]) or [],
            loads(row[0]["files"]) or {},
        )


def _upstream(plan: Any, steps: set[str]) -> set[str]:
    """The steps ``steps`` depend on, directly or not."""
    out: set[str] = set()
    todo = [d for sid in steps for d in plan.steps[sid].deps]
    while todo:
        sid = todo.pop()
        if sid not in out and sid in plan.steps:
            out.add(sid)
            todo.extend(plan.steps[sid].deps)
    return out


def _context(plan: Any, recorded: list[Recorded]) -> dict[str, Any]:
    """What ``steps.ID`` holds for each step of the run, from its recorded results (as a run
    that reused them all would see them)."""
    plain: dict[str, Any] = {}
    elements: dict[str, list[tuple[int, Any]]] = {}
    for rec in recorded:
        if rec.element is None:
            plain[rec.step] = rec.output
        else:
            elements.setdefault(rec.step, []).append((rec.element, rec.output))
    out: dict[str, Any] = {}
    for sid in plan.order:
        if sid in elements:
            els = sorted(elements[sid], key=lambda e: e[0])
            out[sid] = {
                "status": "cached",
                "output": [o for _, o in els],
                "elements": [
                    {"index": i, "status": "cached", "output": o, "reason": None} for i, o in els
                ],
            }
        elif sid in plain:
            out[sid] = {"status": "cached", "output": plain[sid]}
        else:
            out[sid] = {"status": "skipped", "output": None}
    return out


def _comparable(output: Any, path: tuple[str, ...] = ()) -> Any:
    """``output`` without its BOOKKEEPING fields (a list's items are at ``*``)."""
    if isinstance(output, dict):
        return {
            k: _comparable(v, (*path, k))
            for k, v in output.items()
            if (*path, k) not in BOOKKEEPING
        }
    if isinstance(output, list):
        return [_comparable(v, (*path, "*")) for v in output]
    return output


def _relocated(value: Any, scratch: str, real: str) -> Any:
    """The rebuilt output with the copy's root named as the real one (a step that reports
    absolute paths would otherwise differ only by where it ran)."""
    if isinstance(value, str):
        return value.replace(scratch, real) if scratch in value else value
    if isinstance(value, dict):
        return {k: _relocated(v, scratch, real) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocated(v, scratch, real) for v in value]
    return value


def _copy_tree(src: Path, dst: Path, state_dir: Path, leave_out: set[str]) -> None:
    """A copy of the project: regular files copied (never linked: a command writing into its
    copy must not reach the original), symlinks kept as links, the state and the absolute paths
    in ``leave_out`` left out."""
    left_out = leave_out | {os.fspath(state_dir)}

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n in SKIPPED_DIRS or os.path.join(folder, n) in left_out]

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)
    # An absolute link into the project points into the copy instead: a command writing
    # through it must reach the copy, not the original.
    base = os.fspath(src)
    for folder, dirs, files in os.walk(dst):
        for name in dirs + files:
            link = os.path.join(folder, name)
            if not os.path.islink(link):
                continue
            target = os.readlink(link)
            if os.path.isabs(target) and (target == base or target.startswith(base + os.sep)):
                os.unlink(link)
                os.symlink(os.fspath(dst) + target[len(base) :], link)
