"""The recorder: a run's journal rows and its event stream.

Everything a run writes goes through here: the run's row, one row per execution (ran, failed,
cached, awaiting a decision), the provider ledger's calls, the per-phase progress and the
events (to the reporter at once, to the journal in batches). The scheduler and the step bodies
never write the journal themselves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import DiskFull
from ...pipeline.compiler import Plan
from ...providers.limits import waiting
from ...source import secretmask
from ...state.journal import Journal
from ...state.records import dumps, loads
from ...steps.base import StepResult
from .events import Event, EventType, Reporter
from .keys import KeyParts
from .options import ApplyOptions
from .outcomes import RunStatus, StepOutcome, StepStatus
from .progress import Progress

if TYPE_CHECKING:  # (spend.py is imported at a run's first provider call)
    from .spend import RunSpend

PROGRESS_WRITE_S = 0.2  # the run's progress row is rewritten at most this often mid-run
# Held execution rows (cached ones, and those of elements run start to end without a wait) and
# events are written in groups, at least this often (the journal commits its batch at the same
# pace, so a reader elsewhere sees them about as soon), their ids before any later execution's
# (in the order the executions finished: see Recorder.started).
GROUP_S = 0.05
GROUP_ROWS = 1000  # (a pass of owed steps, scheduler.PAY_EVERY: written after the next start)
_CACHED_COLUMNS = (
    "run_id", "step_id", "element", "key", "status", "pipeline", "output",
    "started_at", "finished_at", "attempts", "contract", "why", "report",
)  # fmt: skip


def _shapes(held: list[tuple[tuple[str, ...], tuple[Any, ...]]]) -> list[tuple[int, int]]:
    """The runs of rows of one shape (their columns) in ``held``: (start, end) each."""
    runs, start = [], 0
    for end in range(1, len(held) + 1):
        if end == len(held) or held[end][0] != held[start][0]:
            runs.append((start, end))
            start = end
    return runs


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


class JournalLedger:
    """The idempotency ledger a step sees, backed by the journal's calls table."""

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        step_id: str,
        spend: Callable[[], RunSpend] | None = None,
    ) -> None:
        self.journal, self.run_id, self.step_id = journal, run_id, step_id
        # The run's spend and budgets (spend.py), made at its first call; None: not kept.
        self.spend = spend

    def completed(self, key: str) -> dict[str, Any] | None:
        row = self.journal.call(key)
        if row and row["status"] == "completed":
            result: dict[str, Any] = loads(row["result"]) or {}
            return result
        return None

    def record(self, key: str) -> dict[str, Any] | None:
        return self.journal.call(key)

    def begin(self, key: str, meta: Mapping[str, Any]) -> None:
        if self.spend is not None:  # over a budget it raises: neither journaled nor sent
            self.spend().begin(key, meta)
        self.journal.begin_call(key, self.run_id, self.step_id, meta)

    def sent(self, key: str) -> None:
        self.journal.call_sent(key)

    async def durable(self, *, stops: bool = True) -> None:
        try:
            # Without the CPU slot meanwhile: the calls of every element waiting here (not only
            # the --jobs that hold a slot) share the commit.
            async with waiting():
                await self.journal.settle()
        except DiskFull:
            if stops:
                raise

    def remote_id(self, key: str, remote_id: str, *, durable: bool = True) -> None:
        self.journal.call_remote_id(key, remote_id, durable=durable)

    def complete(self, key: str, result: Mapping[str, Any]) -> None:
        if self.spend is not None:  # its usage in one shape, journaled with it (spend.py)
            result = self.spend().complete(key, result)
        self.journal.complete_call(key, result)

    def fail(self, key: str, error: str, status: str = "failed") -> None:
        if self.spend is not None:
            self.spend().fail(key, status)
        self.journal.fail_call(key, error, status)

    def remote_job(self, key: str) -> dict[str, Any] | None:
        return self.journal.call_job(key)

    def note_remote_job(self, key: str, job: Mapping[str, Any] | None) -> None:
        self.journal.note_call_job(key, job)


class Recorder:
    """Writes one run's rows and events into ``journal``, reporting events to ``reporter``."""

    def __init__(self, journal: Journal, reporter: Reporter, run_id: str, pipeline: str) -> None:
        self.journal = journal
        self.reporter = reporter
        self.run_id = run_id
        self.pipeline = pipeline
        self._pending_events: list[tuple[str, float, str, str | None, int | None, str]] = []
        self.labels: dict[str, dict[int, str]] = {}  # a for_each's element names (labels.py)
        # Journal writes of finished plain steps, done once their dependents have started
        # (see Scheduler.run): the records are not on the path from one process to the next.
        # (execution id, its finished fields, its objects' sizes), written together.
        self._deferred: list[tuple[int, dict[str, Any], dict[str, int]]] = []
        self._progress_written = 0.0
        # Rows held for one statement, in order: (columns, values), a run of equal columns each.
        self._held: list[tuple[tuple[str, ...], tuple[Any, ...]]] = []
        # Rows of executions started with hold=True, by their (negative) ids: written, whole,
        # once they end. A body that never waits has no moment at which its row saying it
        # runs could be read; writing it and then rewriting it cost two statements an element.
        self._unstarted: dict[int, dict[str, Any]] = {}
        self._last_held_id = 0
        # Rows held as an execution started, written after it (see ``started``) under the ids
        # they would have had before it: (the first of those ids, the rows).
        self._gapped: list[tuple[int, list[tuple[tuple[str, ...], tuple[Any, ...]]]]] = []
        self._grouped_since = time.monotonic()

    # -- events --------------------------------------------------------------------------------

    def emit(
        self, type_: EventType, step: str | None = None, element: int | None = None, **data: Any
    ) -> None:
        if element is not None and step in self.labels and element in self.labels[step]:
            data = {**data, "label": self.labels[step][element]}  # console, page, --events
        if secretmask.active():  # every reporter (console, --events file, live page) too
            data = secretmask.mask_json(data)
        ev = Event(type_, self.run_id, step, element, data)
        self.reporter.event(ev)
        if type_ is not EventType.LOG:
            self._pending_events.append(
                (self.run_id, ev.ts, type_.value, step, element, dumps(data))
            )

    def emit_warning(self, message: str) -> None:
        """A warning for the user (consoles show it; the run goes on)."""
        self.emit(EventType.LOG, None, None, level="warning", line=message)

    def waiter(self, step_id: str, index: int | None) -> Callable[[str], None]:
        def waiting(where: str) -> None:
            self.emit(EventType.STEP_WAITING, step_id, index, where=where)

        return waiting

    def logger(self, step_id: str, index: int | None) -> Callable[[str], None]:
        def log(line: str) -> None:
            self.emit(EventType.LOG, step_id, index, line=line)

        return log

    def flush_deferred(self) -> None:
        """Write the finished plain steps' records: their objects in one statement, their rows
        in one for each shape (a statement each was ~8% of a 1,000-command fan-out's loop)."""
        if self._deferred:
            batch, self._deferred = self._deferred, []
            sizes = {d: n for _, _, step_sizes in batch for d, n in step_sizes.items()}
            if sizes:
                self.journal.record_artifacts(sizes)
            shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for exec_id, row, _ in batch:
                if exec_id < 0:
                    self._finish(exec_id, row)
                else:
                    shapes.setdefault(tuple(row), []).append((*row.values(), exec_id))
            for columns, rows in shapes.items():
                self.journal.finish_executions(columns, rows)
        if self._gapped:  # (once the execution they wait for has started its body)
            self._write_gapped()
        if (
            time.monotonic() - self._grouped_since > GROUP_S
            or len(self._pending_events) + len(self._held) > GROUP_ROWS
        ):
            self.flush_events()

    def flush_events(self) -> None:
        """Write the execution rows and the events held so far."""
        self.write_held()
        if self._pending_events:
            self.journal.add_events(self._pending_events)
            self._pending_events = []
        self._grouped_since = time.monotonic()

    def write_held(self) -> None:
        """Write the execution rows held so far, one statement for each run of one shape."""
        self._write_gapped()
        if not self._held:
            return
        held, self._held = self._held, []
        for start, end in _shapes(held):
            self.journal.add_executions(held[start][0], [v for _, v in held[start:end]])

    def _write_gapped(self) -> None:
        gapped, self._gapped = self._gapped, []
        for first, held in gapped:
            for start, end in _shapes(held):
                rows = [v for _, v in held[start:end]]
                self.journal.add_executions(held[start][0], rows, first_id=first + start)

    def _hold(self, columns: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self._held.append((columns, values))
        # Written with the events held so far once the first is old (a for_each of slow
        # elements that never wait shows its progress as others do), alone once there are
        # enough: their events follow at the next settle.
        if time.monotonic() - self._grouped_since > GROUP_S:
            self.flush_events()
        elif len(self._held) >= GROUP_ROWS:
            self.write_held()

    def _finish(self, exec_id: int, fields: dict[str, Any]) -> None:
        """An execution's end: its row rewritten, or written whole if it was held."""
        if exec_id < 0:
            row = self._unstarted.pop(exec_id)
            row.update(fields)
            self._hold(tuple(row), tuple(row.values()))
        else:
            self.journal.finish_execution(exec_id, **fields)

    # -- the run's row -------------------------------------------------------------------------

    def run_started(self, plan: Plan, options: ApplyOptions) -> None:
        self.journal.create_run(
            {
                "id": self.run_id,
                "pipeline": plan.name,
                "pipeline_file": str(plan.file.resolve()),
                "item": options.item,
                "status": RunStatus.RUNNING.value,
                "kind": options.kind,
                "parent_run_id": options.parent_run_id,
                "params": dumps(plan.params),
                "pid": os.getpid(),
                "reference_asset": options.reference_asset,
            }
        )

    def run_resumed(self, plan: Plan) -> None:
        self.journal.update_run(
            self.run_id,
            status=RunStatus.RUNNING.value,
            pid=os.getpid(),
            finished_at=None,
            exit_code=None,
            reason=None,
            cancel_requested=None,
            params=dumps(plan.params),
        )

    def cancel_requested(self) -> bool:
        """`runner runs cancel` (from another process) asked this run to stop."""
        rows = self.journal.query("SELECT cancel_requested FROM runs WHERE id=?", (self.run_id,))
        return bool(rows and rows[0]["cancel_requested"])

    def phase_entered(self, phase: str) -> None:
        self.journal.update_run(self.run_id, current_phase=phase)
        self.emit(EventType.PHASE_ENTERED, phase=phase)

    def progress(self, counts: Callable[[], dict[str, dict[str, int]]]) -> None:
        """Rewrite the run's progress, at most every PROGRESS_WRITE_S (the final record is
        written by run_finished)."""
        now = time.monotonic()
        if now - self._progress_written > PROGRESS_WRITE_S:
            self._progress_written = now
            self.journal.update_run(self.run_id, progress=dumps(counts()))

    def every_outcome(
        self,
        order: list[str],
        outcomes: Mapping[str, StepOutcome],
        progress: Progress,
        reason: str | None,
    ) -> list[StepOutcome]:
        """Each step's outcome in plan order; a step never reached (cancelled, aborted) is
        shown skipped, in the event stream as well."""
        self.write_held()  # what settles the run may read them
        steps = []
        for sid in order:
            outcome = outcomes.get(sid)
            if outcome is None:
                outcome = StepOutcome(sid, StepStatus.SKIPPED, reason=reason or "not reached")
                if sid not in progress.finished:
                    self.emit(EventType.STEP_SKIPPED, sid, reason=outcome.reason)
                    progress.mark(sid, StepStatus.SKIPPED)
            steps.append(outcome)
        return steps

    def run_finished(
        self,
        status: RunStatus,
        exit_code: int,
        reason: str | None,
        *,
        phase: str | None,
        progress: dict[str, dict[str, int]],
        started: float,
    ) -> None:
        if self.labels:  # what each for_each element was called, journaled with the run
            from ...state import labels

            labels.record(self.journal, self.run_id, self.labels)
        self.journal.update_run(
            self.run_id,
            status=status.value,
            finished_at=time.time(),
            exit_code=exit_code,
            reason=reason,
            current_phase=phase,
            progress=dumps(progress),
        )
        self.emit(
            EventType.RUN_FINISHED,
            status=status.value,
            exit_code=exit_code,
            duration_s=round(time.time() - started, 6),
            reason=reason,
        )
        self.flush_events()

    # -- execution rows ------------------------------------------------------------------------

    def failure(
        self, step_id: str, el_index: int, key: str | None, reason: str, attempts: int
    ) -> None:
        """An execution that failed before its body ran (its arguments, a refused restore)."""
        self.write_held()
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step_id,
                "element": el_index,
                "key": key,
                "status": "failed",
                "pipeline": self.pipeline,
                "error": reason,
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": attempts,
            }
        )

    def reused(
        self,
        step_id: str,
        el_index: int,
        key: str,
        output: Any,
        why: str,
        contract: str | None = None,
        report: Any = None,
    ) -> None:
        """An execution answered without running (cache, approval, user edit)."""
        now = time.time()
        self._hold(
            _CACHED_COLUMNS,
            (
                *(self.run_id, step_id, el_index, key, "cached", self.pipeline, dumps(output)),
                *(now, now, 0, contract, why, dumps(report) if report is not None else None),
            ),
        )

    def fetched(
        self,
        step_id: str,
        el_index: int,
        key: str,
        parts: KeyParts,
        contract: str | None,
        *,
        output: Any,
        artifacts: list[str],
        sizes: dict[str, int],
        files: dict[str, str],
        report: Any,
    ) -> None:
        """An execution answered by the remote cache: a completed row, so the next apply finds
        it locally."""
        now = time.time()
        self.write_held()
        self.journal.record_artifacts(sizes)
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step_id,
                "element": el_index,
                "key": key,
                "status": "completed",
                "pipeline": self.pipeline,
                "output": dumps(output),
                "artifacts": dumps(artifacts),
                "files": dumps(files),
                "report": dumps(report) if report is not None else None,
                "started_at": now,
                "finished_at": now,
                "attempts": 0,
                "key_parts": dumps(parts.summary()),
                "contract": contract,
                "why": "cached (remote)",
            }
        )

    def started(
        self,
        step_id: str,
        el_index: int,
        key: str,
        parts: KeyParts,
        contract: str | None,
        *,
        hold: bool = False,
    ) -> int:
        """The row of an execution about to run its body; returns its id. ``hold``: the body
        never waits (nothing can happen, or be seen, between its start and its end), so the
        row is written once, whole, when it ends; the id is then a stand-in (negative)."""
        row = {
            "run_id": self.run_id,
            "step_id": step_id,
            "element": el_index,
            "key": key,
            "status": "running",
            "pipeline": self.pipeline,
            "started_at": time.time(),
            "attempts": 0,
            "key_parts": dumps(parts.summary()),
            "contract": contract,
        }
        if hold:
            self._last_held_id -= 1
            self._unstarted[self._last_held_id] = row
            return self._last_held_id
        if self._held:
            # The rows held go before this one (ids in the order the executions ended), but
            # are written once its body has started (the next settle): a watch cycle's 500
            # reused steps' rows were ~10% of its way from a save to the first command.
            first = self.journal.start_execution_after(row, len(self._held))
            if first is not None:
                self._gapped.append((first, self._held))
                self._held = []
                return first + len(self._gapped[-1][1])
        self.write_held()
        return self.journal.start_execution(row)

    def rekeyed(self, exec_id: int, key: str, parts: KeyParts, *, contract: bool) -> None:
        """An execution whose body read other files than its key predicted: its row goes
        under the key of what it read (engine/run/recorded.py), with those parts; ``contract``:
        its contract was its key (the step has no `contract:`), and follows it."""
        fields: dict[str, Any] = {"key": key, "key_parts": dumps(parts.summary())}
        if contract:
            fields["contract"] = key
        if exec_id < 0:  # a held row, written whole when the execution ends
            self._unstarted[exec_id].update(fields)
        else:
            self.journal.finish_execution(exec_id, **fields)

    def kept_edits(self, exec_id: int, kept: Mapping[str, str]) -> None:
        """Output files edited by hand, kept in the store before the execution writes them
        again: named in its report at once (gc keeps what a report names), so never held."""
        if exec_id < 0:
            raise ValueError("an execution keeping edits is journaled as it starts, not held")
        self.journal.finish_execution(exec_id, report=dumps({"edited_outputs_kept": dict(kept)}))

    def cancelled(self, exec_id: int, attempts: int) -> None:
        self._finish(
            exec_id,
            {"status": "cancelled", "finished_at": time.time(), "attempts": attempts,
             "error": "cancelled"},
        )  # fmt: skip

    def awaiting_batch(
        self, exec_id: int, attempts: int, reason: str, duration: float, *, call: str | None
    ) -> None:
        """An execution whose call ``call`` waits in a provider's batch (a later apply collects
        it); its report names the call, so a plan finds the batch that holds it."""
        self._finish(
            exec_id,
            {"status": "awaiting_batch", "finished_at": time.time(), "attempts": attempts,
             "error": reason, "duration_s": duration,
             "report": dumps({"batch_call": call}) if call else None},
        )  # fmt: skip

    def failed(
        self, exec_id: int, attempts: int, reason: str, duration: float, output: Any
    ) -> None:
        self._finish(
            exec_id,
            {
                "status": "failed",
                "finished_at": time.time(),
                "attempts": attempts,
                "error": reason,
                "duration_s": duration,
                "output": dumps(output) if output is not None else None,
            },
        )

    def passed(
        self,
        exec_id: int,
        result: StepResult,
        sizes: dict[str, int],
        *,
        output_text: str,
        status: str,
        attempts: int,
        duration: float,
        defer: bool,
        worker: str | None = None,
        key: str | None = None,
        contract: str | None = None,
    ) -> None:
        """A body that returned and passed its checks. ``defer``: written once the step's
        dependents have started (a plain step), else now (an element: a for_each may hold
        thousands; a held row, which joins the rows held at once). ``worker``: the Dask
        worker that ran the body (None: this process).
        ``output_text``: the output's JSON, encoded as the body returned it (stepbody.py).
        ``key``, ``contract``: what to journal the row under instead of what it started with."""
        # Serialised now, written maybe a moment later: what is recorded is the output as it
        # was returned, whatever a later step does with the objects.
        row = {
            "status": status,
            "finished_at": time.time(),
            "attempts": attempts,
            "duration_s": duration,
            "output": output_text,
            "artifacts": dumps(sorted(sizes)) if sizes else "[]",  # (most steps store none)
            "files": dumps(result.files) if result.files else "{}",
            "report": dumps(result.report) if result.report is not None else None,
            "usage": dumps(result.usage) if result.usage else None,
        }
        if worker is not None:
            row["worker"] = worker
        if key is not None:
            row["key"] = key
        if contract is not None:
            row["contract"] = contract

        if defer and exec_id > 0:  # (a held row is not written on its own: nothing to defer)
            self._deferred.append((exec_id, row, sizes))
            return
        if sizes:
            self.journal.record_artifacts(sizes)
        self._finish(exec_id, row)

    def awaiting(self, step_id: str, key: str, round_: int) -> None:
        """A gate asking for a decision (round ``round_``)."""
        self.write_held()
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step_id,
                "element": -1,
                "key": key,
                "status": "awaiting_human",
                "pipeline": self.pipeline,
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": 0,
                "why": f"round {round_}",
            }
        )

    def decided(
        self, step_id: str, key: str, *, status: str, output: Any, artifacts: list[str], why: str
    ) -> None:
        """A gate's decision (approved: completed; rejected)."""
        self.write_held()
        self.journal.start_execution(
            {
                "run_id": self.run_id,
                "step_id": step_id,
                "element": -1,
                "key": key,
                "status": status,
                "pipeline": self.pipeline,
                "output": dumps(output),
                "artifacts": dumps(artifacts),
                "files": dumps({}),
                "started_at": time.time(),
                "finished_at": time.time(),
                "attempts": 1,
                "why": why,
            }
        )
