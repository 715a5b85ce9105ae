"""One counting vocabulary for plan, apply, resume, watch and cancel: steps and elements.

A step without for_each is counted as a **step**; a for_each step is counted by its
**elements** (an edit to one element is one element to redo, not a whole step). Every number
carries its noun, so `plan: run 1 step and 2 elements` reads the same as the apply's
`completed: ran 1 step and 2 elements` that follows it, and a watch cycle or a cancel says
what it did in the same words (docs/commands.md, "Counting").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class Tally:
    """Steps and elements counted by what happened to them (a status or a plan action). (A
    plain class: the no-op apply's quick path imports this module, and not dataclasses.)"""

    __slots__ = ("elements", "steps")

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self.elements: dict[str, int] = {}

    @classmethod
    def of_steps_json(cls, steps: Iterable[Mapping[str, Any]]) -> Tally:
        """From apply's --json ``steps`` (a for_each step's ``elements`` are counts by status
        with their ``total``)."""
        tally = cls()
        for step in steps:
            counted = step.get("elements")
            if isinstance(counted, Mapping) and counted.get("total"):
                for what, n in counted.items():
                    if what != "total":
                        tally.elements[what] = tally.elements.get(what, 0) + int(n)
            else:
                tally.add_step(str(step["status"]))
        return tally

    def add_step(self, what: str) -> None:
        self.steps[what] = self.steps.get(what, 0) + 1

    def add_element(self, what: str) -> None:
        self.elements[what] = self.elements.get(what, 0) + 1

    def add(self, what: str, elements: Iterable[str] | None) -> None:
        """One step: by its elements' statuses when it has any (a for_each step that expanded),
        else as a step with status ``what``."""
        listed = list(elements or [])
        if listed:
            for e in listed:
                self.add_element(e)
        else:
            self.add_step(what)

    def total(self) -> int:
        return sum(self.steps.values()) + sum(self.elements.values())

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"steps": dict(self.steps), "elements": dict(self.elements)}


def _noun(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def amount(steps: int, elements: int) -> str:
    """``2 steps and 3 elements``, ``1 step``, ``3 elements`` (nothing: ``nothing``)."""
    parts = [_noun(n, w) for n, w in ((steps, "step"), (elements, "element")) if n]
    return " and ".join(parts) or "nothing"


def tally_text(tally: Tally, order: Sequence[str], words: Mapping[str, str] | None = None) -> str:
    """``ran 2 steps and 3 elements, cached 1 step``: each status in ``order`` that counted
    anything (``words`` renames a status: plan's "skip" reads "skip"), or "" for none."""
    out = []
    for what in order:
        s, e = tally.steps.get(what, 0), tally.elements.get(what, 0)
        if s or e:
            out.append(f"{(words or {}).get(what, what)} {amount(s, e)}")
    return ", ".join(out)


# What a run's summary line (apply, resume, decide, a watch cycle) counts, in this order.
COUNTED = ("ran", "cached", "skipped", "failed")


def report_tally(report: Any) -> Tally:
    """The engine's RunReport counted: each step by its status, a for_each step that expanded
    by its elements' (one that stopped in it counts what its elements did, never "nothing")."""
    tally = Tally()
    for o in report.steps:
        elements = None if o.elements is None else [e.status.value for e in o.elements]
        tally.add(o.status.value, elements)
    return tally


# What a plan's summary line counts: its actions, in this order (engine/plan/forecast.py).
PLAN_ORDER = ("run", "unknown", "restore", "fail", "ask", "cached", "skip")


def plan_line(doc: Mapping[str, Any]) -> str:
    """``plan: run 1 step and 2 elements, cached 1 step``: plan --json's ``steps`` counted as
    the apply that follows counts them."""
    tally = Tally()
    for step in doc["steps"]:
        tally.add(str(step["action"]), [str(e["action"]) for e in step.get("elements") or []])
    return "plan: " + (tally_text(tally, PLAN_ORDER) or "nothing")
