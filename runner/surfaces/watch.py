"""`runner watch`: re-apply a pipeline whenever a file it reads changes, by content.

The watched set (``watchset.py``) is recomputed from every successful compile. The state
directory and the pipeline's declared outputs are never watched, so a run cannot trigger
itself; the journal is watched only while a run awaits a human decision. A run that ends
waiting for a provider batch (``awaiting_batch``) is applied again on its own, with backoff (as
an apply polls: ``batchdesk.POLL_FIRST_S`` doubled up to ``POLL_MAX_S``), until the batch is
collected: each look says how far the batch is, and the last one collects it.

An event counts only when the file's sha256 differs from the last one seen (a ``touch`` runs
nothing). A change during a run cancels it (or, with ``interrupt=False``, queues the next cycle).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.run.apply import State, apply_plan_async, state_dir_for
from ..engine.run.batchdesk import POLL_FIRST_S, POLL_MAX_S
from ..engine.run.events import Event, EventType, FanOut, Reporter
from ..engine.run.files import FileHasher
from ..engine.run.options import ApplyOptions
from ..engine.run.outcomes import RunReport, RunStatus, StepOutcome, StepStatus
from ..errors import RunnerError
from ..pipeline.compiler import Plan, compile_pipeline
from .watchreuse import HoldCheck, Readers
from .watchset import DirResolver, WatchSet, norm_path, sha256_or_none, watch_set_for

_MAX_SETTLE = 10  # a file written non-stop still triggers after this many debounce periods


def _step_ms(debounce_ms: int) -> int:
    """How long watchfiles waits for no new change before it yields a batch."""
    return max(5, min(25, debounce_ms // 4))


def produced_files(report: RunReport) -> list[str]:
    """Workspace files the run's steps reported writing (``output.files``)."""
    out: list[str] = []
    for outcome in report.steps:
        files = outcome.output.get("files") if isinstance(outcome.output, dict) else None
        if isinstance(files, dict):
            out.extend(str(k) for k in files)
    return out


@dataclass
class WatchOptions:
    overrides: Mapping[str, str] = field(default_factory=dict)
    state_dir: Path | None = None
    debounce_ms: int = 80
    interrupt: bool = True
    jobs: int | None = None


@dataclass
class Cycle:
    """One re-apply: what changed, what the run did (or the compile error)."""

    number: int
    changed: list[str]
    report: RunReport | None = None
    error: str | None = None
    exit_code: int = 0
    duration_s: float = 0.0
    ran: list[str] = field(default_factory=list)
    cancelled_run: str | None = None  # id of a run stopped by a newer change or Ctrl-C
    poll: bool = False  # started to look at the run's batches again, not by a change
    next_poll_s: float | None = None  # the run waits for a batch: looked at again in this long

    @property
    def summary(self) -> dict[str, int] | None:
        return self.report.summary() if self.report is not None else None

    def to_json(self) -> dict[str, Any]:
        run: dict[str, Any] | None = None
        if self.report is not None:
            run = self.report.to_json()["run"]
        elif self.cancelled_run is not None:
            run = {"id": self.cancelled_run, "status": RunStatus.CANCELLED.value}
        return {
            "cycle": self.number,
            "changed": self.changed,
            "run": run,
            "summary": self.summary,
            "ran": self.ran,
            "duration_s": round(self.duration_s, 4),
            "error": self.error,
            "exit_code": self.exit_code,
            **({"poll": True} if self.poll else {}),
            **({"next_poll_s": self.next_poll_s} if self.next_poll_s is not None else {}),
        }

    def line(self) -> str:
        """The one-line human summary."""
        changed = ", ".join(self.changed) if self.changed else "(start)"
        head = f"cycle {self.number}: {'(batch)' if self.poll else changed}"
        if self.error is not None:
            return f"{head} -> error: {self.error}"
        if self.report is None:
            return f"{head} -> cancelled after {len(self.ran)} ran ({self.duration_s:.2f}s)"
        again = "" if self.next_poll_s is None else f"; its batch again in {self.next_poll_s:g} s"
        return (
            f"{head} -> {work_counts(self.report)}"
            f" [{self.report.status.value}] in {self.duration_s:.2f}s{again}"
        )


def work_counts(report: RunReport) -> str:
    """``ran 1 element, cached 2 elements and 1 step``: what apply's summary line says
    (surfaces/counts.py): a for_each counts by element (an edit to one shot is one element to
    redo, not a whole step), other steps as steps."""
    from .counts import COUNTED, report_tally, tally_text

    return tally_text(report_tally(report), COUNTED) or "nothing to do"


def _done(report: RunReport) -> dict[str, StepOutcome]:
    """The steps of ``report`` that completed (ran or were cached)."""
    return {o.id: o for o in report.steps if o.status in (StepStatus.RAN, StepStatus.CACHED)}


class _RanCollector:
    """Remembers which steps passed, for a run cancelled before it could report."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def event(self, event: Event) -> None:
        if event.type is EventType.STEP_PASSED and event.step_id and event.step_id not in self.ran:
            self.ran.append(event.step_id)

    def close(self) -> None:
        pass


class Watcher:
    """Runs the watch loop for one pipeline file. ``await Watcher(...).run(stop)``.

    ``on_cycle`` receives every finished cycle; ``on_start(number, changed)`` is called before a
    cycle begins; ``reporter`` (optional) receives the engine's events of every run.
    """

    def __init__(
        self,
        file: Path,
        options: WatchOptions | None = None,
        *,
        on_cycle: Callable[[Cycle], None],
        on_start: Callable[[int, list[str]], None] | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.file = norm_path(file)
        self.options = options or WatchOptions()
        self.on_cycle = on_cycle
        self.on_start = on_start
        self.reporter = reporter
        self.state_dir = state_dir_for(file, self.options.state_dir)
        self.plan: Plan | None = None
        self._changed_paths: set[Path] = set()  # changed since the last cycle started
        self._last_report: RunReport | None = None
        self._plan_watch: WatchSet | None = None
        self.watch_set = WatchSet(root=self.file.parent, files=frozenset({self.file}))
        self.hashes: dict[Path, str | None] = {}
        self.cycles = 0
        self.produced: list[str] = []
        self.awaiting = False
        self.awaiting_run: str | None = None
        self.decisions: Any = None
        self._queue: asyncio.Queue[set[Path]] = asyncio.Queue()
        self._restart = asyncio.Event()
        self._state: State | None = None
        # While the last run waits for a provider batch: when (loop time) to apply again, and
        # the wait after that one (doubled each look, as an apply's poll).
        self.poll_at: float | None = None
        self._poll_delay = POLL_FIRST_S
        self._poll_cycle: int | None = None  # the cycle started by a poll
        # The last check's file signatures, saved once its cycle ended (not before its first
        # step: a commit there is a sync on the way to the edit's first command).
        self._hasher: FileHasher | None = None
        # The table of known file signatures, read as a change's first batch arrives (during
        # the quiet period, not after it): a cache, each entry still checked against a stat.
        self._warm: FileHasher | None = None
        self._readers: Readers | None = None  # the last report's reads, by file name
        self._holds = HoldCheck()
        self._reused: set[str] = set()  # the steps the running cycle reuses

    # -- what counts as a change ---------------------------------------------------------------

    def _display(self, path: Path) -> str:
        try:
            return path.relative_to(self.file.parent).as_posix()
        except ValueError:
            return str(path)

    def _content_changes(self, paths: Iterable[Path]) -> list[str]:
        changed = []
        for path in sorted(paths):
            if not self.watch_set.accepts(path) or path in self.watch_set.journal_paths():
                continue
            digest = sha256_or_none(path)
            if path not in self.hashes and digest is None:
                continue  # a file that came and went
            if self.hashes.get(path) != digest:
                self.hashes[path] = digest
                changed.append(self._display(path))
                self._changed_paths.add(path)
        return changed

    def _decision_signature(self) -> Any:
        """The awaiting run's decision rows: a decision changes a row's status."""
        assert self._state is not None
        try:
            return self._state.journal.query(
                "SELECT id, status, decision, decided_at FROM decisions WHERE run_id=? ORDER BY id",
                (self.awaiting_run,),
            )
        except sqlite3.Error:
            return None

    def _decided(self, paths: set[Path]) -> bool:
        """While awaiting a human, a journal write that added a decision means re-apply."""
        if not self.awaiting or not paths & self.watch_set.journal_paths():
            return False
        sig = self._decision_signature()
        if sig == self.decisions:
            return False
        self.decisions = sig
        return True

    def _set_watch(self, ws: WatchSet) -> None:
        """Switch to a new watch set: hash newly watched files, restart the watcher if needed."""
        old = self.watch_set
        for path in ws.files - set(self.hashes):
            self.hashes[path] = sha256_or_none(path)
        for path in set(self.hashes) - ws.files:
            if not ws.matches_glob(path):
                del self.hashes[path]
        self.watch_set = ws
        if ws.directories() != old.directories():
            self._restart.set()

    def _refresh_watch(self, *, recompiled: bool = False) -> None:
        if self.plan is None:
            return
        if recompiled or self._plan_watch is None:
            # Walking every step is the costly part: once per compile, not per cycle end.
            self._plan_watch = watch_set_for(self.plan, self.state_dir)
        base = self._plan_watch
        norm = DirResolver(base.root)
        outputs = base.excluded | {norm.path(rel) for rel in self.produced}
        # And every file the last run's keys hashed: what a body recorded reading (a
        # template's computed include) or a check names is known only from a run.
        hashed = self._last_report.inputs if self._last_report is not None else {}
        files = base.files | {norm.path(p) for p in hashed}
        self._set_watch(
            dataclasses.replace(
                base, files=files - outputs, excluded=outputs, journal=self.awaiting
            )
        )

    # -- the file watcher ----------------------------------------------------------------------

    async def _watch_files(self) -> None:
        from watchfiles import awatch

        # watchfiles yields once its set of (change, path) stops growing for one step; a file
        # saved repeatedly adds no new pair, so the real debounce is done in ``run``.
        debounce = max(1, self.options.debounce_ms)
        step = _step_ms(debounce)
        restarted = False
        while True:
            self._restart.clear()
            ws = self.watch_set
            if restarted:
                # Events between the old watcher stopping and this one starting are not lost:
                # the content check over every watched file catches what changed meanwhile.
                self._queue.put_nowait(set(ws.files))
            restarted = True
            async for batch in awatch(
                *ws.directories(),
                watch_filter=lambda _c, p: self.watch_set.accepts(Path(p)),
                debounce=debounce,
                step=step,
                stop_event=self._restart,
                recursive=False,
            ):
                self._queue.put_nowait({Path(p) for _, p in batch})

    # -- one cycle -----------------------------------------------------------------------------

    def _compile(self) -> Plan:
        return compile_pipeline(self.file, self.options.overrides)

    async def _apply(
        self,
        number: int,
        changed: list[str],
        plan: Plan,
        started: float,
        reuse: dict[str, Any] | None = None,
    ) -> Cycle:
        """Run ``plan``; ``started`` (perf_counter) is when the cycle began, compile included."""
        assert self._state is not None
        collector = _RanCollector()
        reporters: list[Reporter] = [collector]
        if self.reporter is not None:
            reporters.append(self.reporter)
        # A cycle that reuses steps hands its check's file signatures on (the table's, read
        # during the quiet period, and those it hashed): the apply need not read them again.
        options = ApplyOptions(reuse=reuse or {}, hasher=self._hasher if reuse else None)
        if reuse:  # (and the steps whose outputs it found below the root: see check_plan)
            options.outputs_found = frozenset(self._holds.outputs_found)
        if self.options.jobs:
            options.jobs = self.options.jobs
        run_ids: list[str] = []
        run_id: str | None = None
        try:
            try:
                report = await apply_plan_async(
                    plan, self._state, options, FanOut(*reporters), on_start=run_ids.append
                )
            finally:
                run_id = run_ids[0] if run_ids else None
        except asyncio.CancelledError:
            # Superseded by a newer change, or Ctrl-C: the interpreter marked the run cancelled.
            return Cycle(
                number,
                changed,
                exit_code=130,
                ran=collector.ran,
                duration_s=time.perf_counter() - started,
                cancelled_run=run_id,
            )
        except RunnerError as exc:
            return Cycle(
                number,
                changed,
                error=str(exc),
                exit_code=exc.exit_code,
                duration_s=time.perf_counter() - started,
            )
        ran = [o.id for o in report.steps if o.status is StepStatus.RAN]
        return Cycle(
            number,
            changed,
            report=report,
            exit_code=report.exit_code,
            ran=ran,
            duration_s=time.perf_counter() - started,
        )

    def _incremental(self) -> dict[str, Any] | None:
        """When only data files changed since the last finished run: the outcomes of the steps
        no changed file reaches (the plan still holds, so it is not recompiled)."""
        paths, ws, last = self._changed_paths, self._plan_watch, self._last_report
        if self.plan is None or ws is None or last is None or not paths:
            return None
        if not paths <= ws.data_files:
            return None
        plan = self.plan
        done = _done(last)
        # A step is touched when the last run read a changed file for it (its reads can only
        # differ if its arguments did, i.e. an upstream or the pipeline changed), or when it
        # did not complete last time.
        if self._readers is None:
            self._readers = Readers(last, done)
        touched = {sid for sid in plan.order if sid not in done}
        touched |= self._readers.reaching({str(p) for p in paths}, DirResolver(plan.root))
        affected = plan.downstream(touched)
        # Only the steps the change does not reach need their results checked: the others run
        # again whether their results still hold or not.
        kept = {sid: o for sid, o in done.items() if sid not in affected}
        assert self._state is not None
        hasher = self._warm or FileHasher(self._state.journal)
        self._hasher, self._warm = hasher, None
        gone = self._holds.no_longer_hold(self._state, plan, kept, last.run_id, hasher)
        affected |= plan.downstream(gone)
        # (and whether the outputs of those about to run are below the root, for check_plan)
        self._holds.find_outputs(plan, affected - self._holds.outputs_found)
        return {sid: o for sid, o in kept.items() if sid not in affected}

    def _start(self, changed: list[str], *, poll: bool = False) -> asyncio.Task[Cycle] | None:
        """Recompile and start a run (``poll``: to look at its batches); an invalid pipeline
        ends the cycle at once."""
        self.cycles += 1
        number = self.cycles
        self.poll_at = None
        self._poll_cycle = number if poll else None
        if self.on_start is not None:
            self.on_start(number, changed)
        started = time.perf_counter()
        reuse = self._incremental()
        self._changed_paths = set()
        self._reused = set(reuse or ())
        if reuse is not None and self.plan is not None:
            self.awaiting = False
            return asyncio.create_task(
                self._apply(number, changed, self.plan, started, reuse), name=f"cycle-{number}"
            )
        try:
            plan = self._compile()
        except RunnerError as exc:
            # Keep the last good pipeline's watch set, so fixing any file brings it back.
            self.on_cycle(
                Cycle(
                    number,
                    changed,
                    error=str(exc),
                    exit_code=exc.exit_code,
                    duration_s=time.perf_counter() - started,
                )
            )
            return None
        self.plan = plan
        self.awaiting = False
        self._refresh_watch(recompiled=True)
        cycle = self._apply(number, changed, plan, started)
        return asyncio.create_task(cycle, name=f"cycle-{number}")

    def _finished(self, cycle: Cycle) -> None:
        if self._hasher is not None:
            self._hasher.flush()
            self._hasher = None
        # Only a finished run can stand in for the steps a later change does not reach.
        self._last_report = cycle.report if cycle.exit_code != 130 else None
        self._holds.keep(self._reused)  # (the others' results may be new: read them again)
        self._readers = None
        if self._last_report is not None:
            self._readers = Readers(self._last_report, _done(self._last_report))
        if cycle.report is not None:
            self.produced = produced_files(cycle.report)
            self.awaiting = cycle.report.status is RunStatus.AWAITING_HUMAN
            self.awaiting_run = cycle.report.run_id if self.awaiting else None
            if self.awaiting:
                self.decisions = self._decision_signature()
            self._refresh_watch()
        cycle.poll = cycle.number == self._poll_cycle
        if cycle.report is not None and cycle.report.status is RunStatus.AWAITING_BATCH:
            cycle.next_poll_s = self._poll_delay
            self.poll_at = asyncio.get_running_loop().time() + self._poll_delay
            self._poll_delay = min(POLL_MAX_S, self._poll_delay * 2)
        elif cycle.exit_code != 130:
            self._poll_delay = POLL_FIRST_S
        self.on_cycle(cycle)

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Apply once, then on every real change, until ``stop`` is set.

        Events are gathered until none arrived for ``debounce_ms`` (at most ``_MAX_SETTLE``
        debounces), then compared by content. Returns 130 when the stop cancelled a run, else 0.
        """
        loop = asyncio.get_running_loop()
        debounce = self.options.debounce_ms
        # A batch arrives once watchfiles saw no new change for its step: that much of the
        # quiet period has passed already (waiting it again was a fifth of a save's latency).
        quiet = max(0, debounce - _step_ms(debounce)) / 1000
        settle_by = debounce * _MAX_SETTLE / 1000
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state = State.open(self.state_dir)
        self.watch_set = WatchSet(
            root=self.file.parent, files=frozenset({self.file}), state_dir=self.state_dir.resolve()
        )
        self.hashes = {self.file: sha256_or_none(self.file)}
        watcher = asyncio.create_task(self._watch_files(), name="watchfiles")
        getter: asyncio.Task[set[Path]] = asyncio.create_task(self._queue.get())
        stopper = asyncio.create_task(stop.wait())
        running = self._start([])
        pending: list[str] = []
        buffer: set[Path] = set()
        first_at = last_at = 0.0
        try:
            while True:
                waits: set[asyncio.Future[Any]] = {getter, stopper, watcher}
                if running is not None:
                    waits.add(running)
                settle_at = min(last_at + quiet, first_at + settle_by)
                timeout = max(0.0, settle_at - loop.time()) if buffer else None
                if self.poll_at is not None and running is None:
                    until = max(0.0, self.poll_at - loop.time())
                    timeout = until if timeout is None else min(timeout, until)
                done, _ = await asyncio.wait(
                    waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if watcher in done:
                    watcher.result()  # the watcher died: raise its error
                if stopper in done:
                    if running is None:
                        return 0
                    running.cancel()
                    self._finished(await running)
                    return 130
                if running is not None and running in done:
                    self._finished(running.result())
                    running = None
                    # The cycle's young objects are collected now, while nothing waits: the
                    # count starts again from zero, so a collection seldom falls on the next
                    # change's way to its first command (one there was 30-40 ms of an edit).
                    gc.collect(0)
                if getter in done:
                    arrived = loop.time()
                    if not buffer:
                        first_at = arrived
                        if running is None and self._warm is None and self._last_report is not None:
                            self._warm = FileHasher(self._state.journal)
                    buffer |= getter.result()
                    last_at = arrived  # (reading the table is part of the quiet period)
                    getter = asyncio.create_task(self._queue.get())
                if buffer and loop.time() >= min(last_at + quiet, first_at + settle_by):
                    changed = self._content_changes(buffer)
                    if self._decided(buffer):
                        changed.append(self._display(self.state_dir.resolve() / "journal.db"))
                    buffer = set()
                    pending.extend(c for c in changed if c not in pending)
                    if changed and running is not None and self.options.interrupt:
                        running.cancel()
                        continue  # its cycle is reported when the task ends, then we restart
                if pending and running is None:
                    running = self._start(pending)
                    pending = []
                polled = self.poll_at is not None and loop.time() >= self.poll_at
                if polled and running is None and not buffer:
                    running = self._start([], poll=True)  # the run's batches, looked at again
        finally:
            for task in (watcher, getter, stopper):
                task.cancel()
            await asyncio.gather(watcher, getter, stopper, return_exceptions=True)
            self._state.close()
