"""Events the engine emits, and the reporter protocol that receives them.

The engine never prints: consoles, JSON-lines files, the journal's event table and (later) a web
page are all reporters.
"""

from __future__ import annotations

import contextlib
import enum
import json
import sys
import time
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import IO, Any, Protocol

from ...source.termtext import safe_json


class EventType(enum.Enum):
    RUN_STARTED = "RunStarted"
    PHASE_ENTERED = "PhaseEntered"
    STEP_STARTED = "StepStarted"
    STEP_SKIPPED = "StepSkipped"
    STEP_RETRYING = "StepRetrying"
    # A step's call waits in its provider's queue behind other work: where ("queued, 1 ahead
    # on HOST"), said while it waits, so a person knows the wait is not a hang.
    STEP_WAITING = "StepWaiting"
    STEP_PASSED = "StepPassed"
    STEP_FAILED = "StepFailed"
    GATE_AWAITING = "GateAwaiting"
    # A for_each step ended (each element had its own events): its status and element count,
    # so a reporter knows the step, and maybe its phase, is done.
    FOR_EACH_ENDED = "ForEachEnded"
    GATE_DECIDED = "GateDecided"
    RUN_FINISHED = "RunFinished"
    OVERRIDE_USED = "OverrideUsed"
    OVERRIDE_SET_ASIDE = "OverrideSetAside"
    OUTPUT_EDITED = "OutputEdited"  # an output file was edited by hand (kept, then restored)
    LOG = "Log"


@dataclass(frozen=True)
class Event:
    """Something that happened in a run, as reporters and the journal receive it."""

    type: EventType
    run_id: str
    step_id: str | None = None
    element: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "run_id": self.run_id,
            "step": self.step_id,
            "element": self.element,
            "ts": round(self.ts, 6),
            **self.data,
        }


class Reporter(Protocol):
    def event(self, event: Event) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    def event(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass


class RecordingReporter:
    """Keeps every event in memory (tests assert on exact sequences)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def event(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass

    def types(self) -> list[str]:
        return [e.type.value for e in self.events]


# json.dumps(..., ensure_ascii=False, default=str, allow_nan=False) built this encoder again
# for every event (~1.5 us of a watch cycle's ~8 for each of the 500 steps it reuses).
_LINE = json.JSONEncoder(ensure_ascii=False, default=str, allow_nan=False)
if c_make_encoder is not None:
    # And what _LINE.encode runs, made once (as state/canonical.py's): encode() builds it again
    # for every line (a third of a line's ~3 us). Same options, the same text byte for byte;
    # no cycle bookkeeping (an event's data never holds itself: RecursionError if it did).
    _CHUNKS = c_make_encoder(None, str, encode_basestring, None, ": ", ", ", False, False, False)

    def _line(value: dict[str, Any]) -> str:
        return "".join(_CHUNKS(value, 0))

else:  # an interpreter without the C accelerator

    def _line(value: dict[str, Any]) -> str:
        return _LINE.encode(value)


class JsonLinesReporter:
    """Writes every event as one JSON line (``--events FILE``)."""

    def __init__(self, stream: IO[str], *, close_stream: bool = False) -> None:
        self.stream = stream
        self.close_stream = close_stream
        self.failed = False

    def event(self, event: Event) -> None:
        if self.failed:
            return
        # strict JSON, nothing a terminal tailing the file would act on (same data)
        line = _line(event.to_json())
        try:
            self.stream.write(safe_json(line) + "\n")
            # A step answered from the cache comes in a burst of them (a watch cycle's 1,000):
            # they reach the file with the next other event (a start, the run's end), which
            # every burst is followed by; a write call each was a third of the cycle's start.
            if event.type is not EventType.STEP_SKIPPED:
                self.stream.flush()
        except OSError as exc:  # a full disk, /dev/full: the run goes on, its journal has them
            self.failed = True
            sys.stderr.write(
                f"warning: --events: cannot write ({exc.strerror}); no more events are written "
                "there (the journal keeps them: runner runs events RUN)\n"
            )

    def close(self) -> None:
        if self.close_stream:
            with contextlib.suppress(OSError):  # what a failed write left buffered (warned)
                self.stream.close()


class FanOut:
    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = list(reporters)

    def event(self, event: Event) -> None:
        for r in self.reporters:
            r.event(event)

    def close(self) -> None:
        for r in self.reporters:
            r.close()
