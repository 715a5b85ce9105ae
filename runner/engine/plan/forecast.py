"""What a plan says, step by step and element by element: the forecast's data, its console
lines, and the forecast read from the no-op fast path's fingerprint. Light on purpose (no
compiler, no Jinja): a plan answered by the fingerprint imports only this."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class Action(enum.Enum):
    RUN = "run"  # would run (reasons say why)
    CACHED = "cached"  # answered from the store
    RESTORE = "restore"  # cached; a missing or hand-edited output would be put back
    UNKNOWN = "unknown"  # reads an upstream result that does not exist yet
    SKIP = "skip"  # a when: condition is false, or an upstream is skipped
    ASK = "ask"  # a human_gate would ask for a decision
    FAIL = "fail"  # would fail without running: an output edited by hand, with on_edit: fail

    @property
    def changes(self) -> bool:
        """Whether this action means the apply would do work (exit code, summary)."""
        return self is not Action.CACHED and self is not Action.SKIP


@dataclass
class Call:
    """Provider calls one element would make (an upper bound: finished calls are free)."""

    provider: str
    model: str | None
    kind: str  # "text" | "image"
    count: int
    size: str | None = None
    quality: str | None = None
    input_chars: int | None = None  # text known before the apply (None: depends on upstream)
    max_tokens: int | None = None
    batch: bool = False  # sent by the provider's batch API (batch mode): its batch price
    waiting: str | None = None  # already in this live batch (paid there): no new cost


@dataclass
class ElementForecast:
    index: int  # -1 for a step without for_each
    action: Action
    reasons: list[str]
    key: str | None = None
    calls: list[Call] = field(default_factory=list)
    label: str | None = None  # what the element is called (pipeline/labels.py)
    # A shell step's script as it would run, where it differs from `run` (its values by
    # environment: runner/expr/shellenv.py)
    script: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "index": self.index,
            "action": self.action.value,
            "reasons": self.reasons,
            "key": self.key,
        }
        if self.script is not None:
            doc["script"] = self.script
        if self.label is not None:
            doc["label"] = self.label
        return doc


@dataclass
class StepForecast:
    id: str
    uses: str
    action: Action
    reasons: list[str]
    key: str | None = None
    elements: list[ElementForecast] | None = None
    calls: list[Call] = field(default_factory=list)
    script: str | None = None  # a plain shell step's script as it would run (ElementForecast)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.elements or []:
            out[e.action.value] = out.get(e.action.value, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "uses": self.uses,
            "action": self.action.value,
            "reasons": self.reasons,
            "key": self.key,
        }
        if self.script is not None:
            doc["script"] = self.script
        if self.elements is not None:
            doc["elements"] = [e.to_json() for e in self.elements]
            doc["counts"] = {"total": len(self.elements), **self.counts()}
        return doc


@dataclass
class Forecast:
    pipeline: str
    steps: list[StepForecast]

    @property
    def changes(self) -> bool:
        return any(s.action.changes for s in self.steps)

    def summary(self) -> dict[str, int]:
        out = {a.value: 0 for a in Action}
        for s in self.steps:
            out[s.action.value] += 1
        return out

    def calls(self) -> list[Call]:
        return [c for s in self.steps for c in s.calls]


def from_fingerprint(doc: dict[str, Any]) -> Forecast | None:
    """The forecast while the no-op fast path's fingerprint holds (``fastpath.check``): every
    step and element cached, as the planner would say, without compiling. None when the
    fingerprint carries no forecast (written by an earlier version)."""
    recorded = doc.get("forecast")
    if not recorded:
        return None
    matched = ["key matches a completed run"]
    steps = []
    for s in recorded["steps"]:
        if s["elements"] is None:
            steps.append(StepForecast(s["id"], s["uses"], Action.CACHED, matched, s["key"]))
            continue
        labels = s.get("labels") or {}
        elements = [
            ElementForecast(i, Action.CACHED, matched, key, label=labels.get(str(i)))
            for i, key in enumerate(s["elements"])
        ]
        action, reasons = summarise(elements)
        steps.append(StepForecast(s["id"], s["uses"], action, reasons, elements=elements))
    return Forecast(doc["name"], steps)


def summarise(elements: list[ElementForecast]) -> tuple[Action, list[str]]:
    counts: dict[Action, int] = {}
    for e in elements:
        counts[e.action] = counts.get(e.action, 0) + 1
    n = len(elements)
    if not elements:
        return Action.CACHED, ["no elements"]
    if counts.get(Action.CACHED, 0) == n:
        return Action.CACHED, [f"all {n} elements cached"]
    for action in (Action.FAIL, Action.RUN, Action.UNKNOWN, Action.RESTORE):
        if counts.get(action):
            parts = ", ".join(f"{c} {a.value}" for a, c in counts.items())
            return action, [f"{n} elements: {parts}"]
    return Action.CACHED, [f"all {n} elements cached"]


def iter_lines(fc: Forecast, *, verbose: bool = True) -> Iterator[str]:
    """The console view: one line per step, then one per element that is not cached."""
    for s in fc.steps:
        yield f"{s.action.value:8} {s.id}: {'; '.join(s.reasons)}"
        if not verbose:
            continue
        if s.script is not None and s.action is not Action.CACHED:
            yield from _script_lines(s.script, f"{'':8}   ")
        for e in s.elements or []:
            if e.action is not Action.CACHED:
                name = f"{e.index} {e.label}" if e.label is not None else str(e.index)
                yield f"{'':8}   [{name}] {e.action.value}: {'; '.join(e.reasons)}"
                if e.script is not None:
                    yield from _script_lines(e.script, f"{'':8}     ")


def _script_lines(script: str, indent: str) -> Iterator[str]:
    """A script as it would run: its values stand as ${RUNNER_VALUE_n} (`runner render --step`
    shows each value)."""
    lines = script.splitlines() or [""]
    yield f"{indent}script: {lines[0]}"
    for line in lines[1:]:
        yield f"{indent}        {line}"
