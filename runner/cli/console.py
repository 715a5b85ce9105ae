"""Console reporters: a live rich progress view on a terminal, plain lines elsewhere.

Everything printed here may carry data (item ids, params, step ids, model text, a command's
stderr): it goes through ``termtext.safe``.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from ..engine.events import Event, EventType
from .termtext import safe


class PlainReporter:
    """One line per finished step (not a TTY, or --json with progress on stderr)."""

    def __init__(self, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self.phase: str | None = None  # a phase header waits until a step of it prints

    def _line(self, text: str) -> None:
        if self.phase is not None:
            header, self.phase = self.phase, None
            self._line(header)
        self.stream.write(text + "\n")
        self.stream.flush()

    def event(self, event: Event) -> None:
        t, sid = event.type, safe(event.step_id)
        el = f"[{event.element}]" if event.element is not None else ""
        d = {k: safe(v) if isinstance(v, str) else v for k, v in event.data.items()}
        if t is EventType.RUN_STARTED:
            self._line(f"run {safe(event.run_id)}: {d.get('pipeline')} ({d.get('steps')} steps)")
        elif t is EventType.PHASE_ENTERED:
            self.phase = f"== phase {d.get('phase')}"  # no header for a phase all cached
        elif t is EventType.STEP_PASSED:
            self._line(f"  ran     {sid}{el} ({d.get('duration_s', 0):.2f}s)")
        elif t is EventType.STEP_SKIPPED:
            reason = str(d.get("reason") or "")
            word = "cached " if reason.startswith("cached") else "skipped"
            extra = "" if reason == "cached" else f" ({reason})"
            if self.verbose or word == "skipped" or reason != "cached":
                self._line(f"  {word} {sid}{el}{extra}")
        elif t is EventType.STEP_RETRYING:
            self._line(f"  retry   {sid}{el} attempt {d.get('attempt')}: {d.get('reason')}")
        elif t is EventType.STEP_FAILED and d.get("rejected"):
            self._line(f"  rejected {sid}: {d.get('reason')}")
        elif t is EventType.STEP_FAILED:
            self._line(f"  FAILED  {sid}{el}: {d.get('reason')}")
        elif t is EventType.GATE_AWAITING:
            self._line(f"  waiting {sid}: a decision is needed")
        elif t in (EventType.OUTPUT_EDITED, EventType.OVERRIDE_SET_ASIDE):
            self._line(f"  {notice(event)}")
        elif t is EventType.RUN_FINISHED:
            self.phase = None
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

    def __init__(self, total: int, stream: IO[str] | None = None) -> None:
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
        self.progress.start()

    def escape(self, value: object) -> str:
        """Data in rich markup: read neither as markup nor by the terminal."""
        text: str = self._markup_escape(safe(value))
        return text

    def event(self, event: Event) -> None:
        t, sid, d = event.type, event.step_id, event.data
        label = self.escape(f"{sid}[{event.element}]" if event.element is not None else str(sid))
        if t is EventType.STEP_STARTED:
            if self.phase is not None:  # a phase header only once one of its steps runs
                self.console.print(f"[bold]== phase {self.escape(self.phase)}[/bold]")
                self.phase = None
            self.in_flight[label] = True
        elif t in (EventType.STEP_PASSED, EventType.STEP_FAILED, EventType.STEP_SKIPPED):
            self.in_flight.pop(label, None)
            if event.element is None:
                self.progress.advance(self.task)
            if t is EventType.STEP_FAILED:
                word = "[yellow]rejected[/yellow]" if d.get("rejected") else "[red]FAILED[/red]"
                reason = self.escape(str(d.get("reason")))
                self.console.print(f"{word} {label}: {reason}", markup=True, highlight=False)
        elif t is EventType.STEP_RETRYING:
            self.console.print(
                f"[yellow]retry[/yellow] {label}: {self.escape(d.get('reason'))}", highlight=False
            )
        elif t in (EventType.OUTPUT_EDITED, EventType.OVERRIDE_SET_ASIDE):
            self.console.print(notice(event), markup=False, highlight=False)
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


def notice(event: Event) -> str:
    """What a person must not miss: their edit of an output, or of a step, was set aside."""
    d, el = event.data, f"[{event.element}]" if event.element is not None else ""
    if event.type is EventType.OVERRIDE_SET_ASIDE:
        return f"edit    {event.step_id}{el}: {d.get('reason')}"
    if d.get("action") == "kept":
        return (
            f"edited  {event.step_id}{el}: {d.get('file')} was edited by hand; "
            "left as is (on_edit: keep)"
        )
    return (
        f"edited  {event.step_id}{el}: {d.get('file')} was edited by hand; your version is kept at "
        f"{d.get('kept_at')} and the recorded output was restored"
    )
