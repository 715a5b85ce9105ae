"""Console reporters: a live rich progress view on a terminal, plain lines elsewhere.

Everything printed here may carry data (item ids, params, step ids, model text, a command's
stderr): it goes through ``termtext.safe``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ...engine.run.events import Event, EventType
from .termtext import safe

# The events after which a step (not one of its elements) has nothing more to say.
STEP_ENDS = frozenset(
    {
        EventType.STEP_PASSED,
        EventType.STEP_SKIPPED,
        EventType.STEP_FAILED,
        EventType.GATE_AWAITING,
        EventType.FOR_EACH_ENDED,
    }
)


class PhaseOrder:
    """Lines of a live run, each under its own phase's header, the phases in pipeline order.

    Independent steps of two phases may run at once. A line of a phase later than the first
    unfinished one waits until every step of the phases before it has ended (or the run ends),
    so the transcript reads phase by phase, as the pipeline lists them; a phase's header is
    printed once, before its first line, and never for a phase with nothing to say (all cached).
    Steps without a phase print at once, without a header.
    """

    def __init__(
        self,
        phases: Sequence[str],
        phase_of: Mapping[str, str | None],
        header: Callable[[str], str] = lambda phase: f"== phase {safe(phase)}",
    ) -> None:
        self.header = header
        used = {p for p in phase_of.values() if p is not None}
        self.order = [p for p in phases if p in used]
        self.phase_of = dict(phase_of)
        self.left = Counter(p for p in phase_of.values() if p is not None)
        self.ended: set[str] = set()
        self.held: dict[str, list[str]] = {}
        self.headed: set[str] = set()
        self.current = 0  # index of the first phase with a step still to end

    @classmethod
    def of(cls, plan: Any, **kw: Any) -> PhaseOrder | None:
        """For a compiled plan with phases; None without (then no header is printed)."""
        if plan is None or not getattr(plan, "phases", None):
            return None
        return cls(plan.phases, {sid: plan.steps[sid].phase for sid in plan.order}, **kw)

    def _head(self, phase: str) -> list[str]:
        if phase in self.headed:
            return []
        self.headed.add(phase)
        return [self.header(phase)]

    def line(self, step: str | None, text: str | None) -> list[str]:
        """What to print now for ``text`` about ``step`` (None: only its phase's header)."""
        phase = self.phase_of.get(step) if step is not None else None
        if phase is None or phase not in self.order:
            return [] if text is None else [text]
        if self.order.index(phase) > self.current:
            held = self.held.setdefault(phase, [])
            if text is not None:
                held.append(text)
            return []
        return self._head(phase) + ([] if text is None else [text])

    def step_ended(self, step: str | None) -> list[str]:
        """A step ended: the lines of the phases that are now first, in order."""
        phase = self.phase_of.get(step) if step is not None else None
        if step is None or phase is None or step in self.ended:
            return []
        self.ended.add(step)
        self.left[phase] -= 1
        out: list[str] = []
        while self.current < len(self.order) and self.left[self.order[self.current]] <= 0:
            self.current += 1
            if self.current < len(self.order):
                out += self._release(self.order[self.current])
        return out

    def _release(self, phase: str) -> list[str]:
        held = self.held.pop(phase, None)
        return self._head(phase) + held if held is not None else []

    def flush(self) -> list[str]:
        """The run ended: every held line, phase by phase."""
        out: list[str] = []
        for phase in self.order:
            out += self._release(phase)
        self.current = len(self.order)
        return out


class PlainReporter:
    """One line per finished step (not a TTY, or --json with progress on stderr)."""

    def __init__(
        self, stream: IO[str] | None = None, *, verbose: bool = False, plan: Any = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        # With the plan, lines go under their own phase, phases in pipeline order; without it
        # (a resumed run), under the phase the engine entered last.
        self.order = PhaseOrder.of(plan)
        self.root: Path | None = getattr(plan, "root", None)  # paths are shown from there
        self.phase: str | None = None  # a phase header waits until a step of it prints
        self.step: str | None = None  # the step the event being printed is about
        self.gone = False  # the stream's reader closed it

    def _line(self, text: str) -> None:
        if self.order is not None:
            self._write(self.order.line(self.step, text))
            return
        if self.phase is not None:
            header, self.phase = self.phase, None
            self._write([header])
        self._write([text])

    def _write(self, lines: list[str]) -> None:
        if lines and not self.gone:
            try:
                self.stream.write("".join(line + "\n" for line in lines))
                self.stream.flush()
            except BrokenPipeError:
                # The reader left (`runner apply ... 2>&1 | head`): progress is not the run.
                # The run goes on and is recorded; nothing more is written there.
                self.gone = True
                _silence(self.stream)

    def event(self, event: Event) -> None:
        self.step = event.step_id
        self._event(event)
        if self.order is not None and event.type in STEP_ENDS and event.element is None:
            self._write(self.order.step_ended(event.step_id))

    def _event(self, event: Event) -> None:
        t, sid = event.type, safe(event.step_id)
        el = element_mark(event)
        d = {k: safe(v) if isinstance(v, str) else v for k, v in event.data.items()}
        if t is EventType.RUN_STARTED:
            n = d.get("steps")
            steps = f"{n} step{'' if n == 1 else 's'}"
            self._line(f"run {safe(event.run_id)}: {d.get('pipeline')} ({steps})")
        elif t is EventType.PHASE_ENTERED:
            self.phase = f"== phase {d.get('phase')}"  # no header for a phase all cached
        elif t is EventType.STEP_PASSED:
            self._line(f"  ran     {sid}{el} ({d.get('duration_s', 0):.2f}s)")
        elif t is EventType.STEP_SKIPPED:
            reason = str(d.get("reason") or "")
            word = "cached " if reason.startswith("cached") else "skipped"
            extra = f" {skip_detail(reason)}" if skip_detail(reason) else ""
            if self.verbose or word == "skipped" or reason != "cached":
                self._line(f"  {word} {sid}{el}{extra}")
        elif t is EventType.STEP_RETRYING:
            self._line(f"  retry   {sid}{el} attempt {d.get('attempt')}: {d.get('reason')}")
        elif t is EventType.STEP_WAITING:
            self._line(f"  waiting {sid}{el}: {d.get('where')}")
        elif t is EventType.STEP_FAILED and d.get("rejected"):
            self._line(f"  rejected {sid}: {d.get('reason')}")
        elif t is EventType.STEP_FAILED:
            self._line(f"  FAILED  {sid}{el}: {d.get('reason')}")
        elif t is EventType.GATE_AWAITING:
            self._line(f"  waiting {sid}: a decision is needed")
        elif t in (EventType.OUTPUT_EDITED, EventType.OVERRIDE_SET_ASIDE):
            self._line(f"  {notice(event, self.root)}")
        elif t is EventType.RUN_FINISHED:
            self.phase = None
            if self.order is not None:
                self._write(self.order.flush())
            self._line(
                f"run {safe(event.run_id)}: {d.get('status')} in {d.get('duration_s', 0):.2f}s"
            )
        elif t is EventType.LOG and d.get("level") == "warning":
            self._line(f"warning: {d.get('line')}")

    def close(self) -> None:
        pass


class WarningsReporter:
    """Only the warnings (``--quiet``): a run that goes on despite a problem still says so."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr

    def event(self, event: Event) -> None:
        if event.type is EventType.LOG and event.data.get("level") == "warning":
            self.stream.write(f"warning: {safe(event.data.get('line'))}\n")
            self.stream.flush()

    def close(self) -> None:
        pass


class LiveReporter:
    """A rich progress bar with the steps in flight, for terminals."""

    def __init__(self, total: int, stream: IO[str] | None = None, *, plan: Any = None) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(file=stream or sys.stderr)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}"),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task("steps", total=total, current="")
        self.in_flight: dict[str, Any] = {}
        self.phase: str | None = None
        self._markup_escape = escape
        self.order = PhaseOrder.of(plan, header=lambda p: f"[bold]== phase {self.escape(p)}[/bold]")
        self.root: Path | None = getattr(plan, "root", None)
        self.step: str | None = None
        self.progress.start()

    def escape(self, value: object) -> str:
        """Data in rich markup: read neither as markup nor by the terminal."""
        text: str = self._markup_escape(safe(value))
        return text

    def _print(self, text: str | None, **kw: Any) -> None:
        """A line about the current step, under its phase's header (see PhaseOrder)."""
        if self.order is None:
            if text is not None:
                self.console.print(text, **kw)
            return
        for line in self.order.line(self.step, text):
            self.console.print(line, **kw)

    def event(self, event: Event) -> None:
        self.step = event.step_id
        self._event(event)
        if self.order is not None and event.type in STEP_ENDS and event.element is None:
            for line in self.order.step_ended(event.step_id):
                self.console.print(line, highlight=False)
        if self.order is not None and event.type is EventType.RUN_FINISHED:
            for line in self.order.flush():
                self.console.print(line, highlight=False)

    def _event(self, event: Event) -> None:
        t, sid, d = event.type, event.step_id, event.data
        label = self.escape(f"{sid}{element_mark(event)}")
        if t is EventType.STEP_STARTED:
            if self.order is not None:
                self._print(None)  # a phase header only once one of its steps runs
            elif self.phase is not None:
                self.console.print(f"[bold]== phase {self.escape(self.phase)}[/bold]")
                self.phase = None
            self.in_flight[label] = True
        elif t is EventType.FOR_EACH_ENDED:
            self.progress.advance(self.task)  # its elements did not move the bar
        elif t in (EventType.STEP_PASSED, EventType.STEP_FAILED, EventType.STEP_SKIPPED):
            self.in_flight.pop(label, None)
            if event.element is None:
                self.progress.advance(self.task)
            if t is EventType.STEP_FAILED:
                word = "[yellow]rejected[/yellow]" if d.get("rejected") else "[red]FAILED[/red]"
                reason = self.escape(str(d.get("reason")))
                self._print(f"{word} {label}: {reason}", markup=True, highlight=False)
        elif t is EventType.STEP_RETRYING:
            self._print(
                f"[yellow]retry[/yellow] {label}: {self.escape(d.get('reason'))}", highlight=False
            )
        elif t is EventType.STEP_WAITING:
            self._print(f"waiting {label}: {self.escape(d.get('where'))}", highlight=False)
        elif t in (EventType.OUTPUT_EDITED, EventType.OVERRIDE_SET_ASIDE):
            self._print(self.escape(notice(event, self.root)), highlight=False)
        elif t is EventType.PHASE_ENTERED:
            self.phase = str(d.get("phase"))
        elif t is EventType.RUN_FINISHED:
            self.progress.update(self.task, completed=self.progress.tasks[0].total)
        elif t is EventType.LOG and d.get("level") == "warning":
            self.console.print(
                f"[yellow]warning[/yellow]: {self.escape(d.get('line'))}", highlight=False
            )
        names = ", ".join(list(self.in_flight)[:4])
        self.progress.update(self.task, current=names)

    def close(self) -> None:
        self.progress.stop()


def element_mark(event: Event) -> str:
    """``[3]``, or ``[3 Lagos]`` for an element with a label (its for_each item, or `label:`),
    made inert for a terminal; "" for a step."""
    if event.element is None:
        return ""
    label = event.data.get("label")
    return f"[{event.element} {safe(label)}]" if isinstance(label, str) else f"[{event.element}]"


def notice(event: Event, root: Path | None = None) -> str:
    """What a person must not miss: their edit of an output, or of a step, was set aside. The
    kept copy's path is shown from ``root`` (the pipeline's root, as the edited file's is)."""
    d, el = event.data, element_mark(event)
    if d.get("kept_at"):
        d = {**d, "kept_at": _from_root(str(d["kept_at"]), root)}
    if event.type is EventType.OVERRIDE_SET_ASIDE:
        return f"edit    {event.step_id}{el}: {d.get('reason')}"
    if d.get("action") == "kept before re-run":
        return (
            f"edited  {event.step_id}{el}: {d.get('file')} was edited by hand; your version is "
            f"kept at {d.get('kept_at')} before the step writes it again"
        )
    if d.get("action") == "kept":
        return (
            f"edited  {event.step_id}{el}: {d.get('file')} was edited by hand; "
            "left as is (on_edit: keep)"
        )
    return (
        f"edited  {event.step_id}{el}: {d.get('file')} was edited by hand; your version is kept at "
        f"{d.get('kept_at')} and the recorded output was restored"
    )


def _from_root(path: str, root: Path | None) -> str:
    """``path`` relative to ``root`` when it lies inside (the state's objects usually do), else
    as the user can open it from where they stand."""
    from ...source.termtext import shown_path

    if root is not None:
        relative = os.path.relpath(path, root)
        if not relative.startswith(".."):
            return relative
    return shown_path(Path(path))


def skip_detail(reason: str) -> str:
    """What a skip's line adds after its word, in parentheses once: "cached (remote)" is
    `cached  STEP (remote)`, never `(cached (remote))`."""
    if reason.startswith("cached"):
        reason = reason[len("cached") :].strip()
    if not reason:
        return ""
    return reason if reason.startswith("(") and reason.endswith(")") else f"({reason})"


def _silence(stream: IO[str]) -> None:
    """Point a stream whose reader left at /dev/null, so that its unwritten buffer and later
    writes (the interpreter's own flush at exit included) fail no more."""
    import os

    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
