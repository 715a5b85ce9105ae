"""Budgets on real spend, held while a run's calls go out: a call is sent only when what was
spent plus the worst case of every call in flight, itself included, stays within each budget.

The engine makes one ``SpendGuard`` per run (engine/run/spend.py: the budgets of ``--max-cost``,
the pipeline's ``limits.max_cost`` and runner.toml's ``[budget]``, with what the day and the month
had spent before the run). Each call is admitted (``admit``) as it goes out, holding its
provider's permit (calls.with_provider_retries awaits ``limits.admitted()``, which the
engine's ledger set up when it journaled the call), and its hold is settled with the call's
real cost when it is back. A call over a budget only because of the calls in flight waits for
them to end; one whose worst case is over a budget on what was spent alone is not sent:
``OverSpend``, and the guard tells the engine once (``on_stop``), which stops the run
``interrupted`` (exit 9). Each line of a batch about to be made is held the same way
(``reserve(batch=True)``, at the batch price, engine/run/batchdesk.py) until its answer is back;
no call waits for those (a batch may take hours): one that does not fit beside them is not sent.
A run without a budget makes no guard (engine/run/spend.py): nothing is held, no call waits.

A call's worst case is the plan's estimate of it (providers/prices.py ``estimate_call``: input
characters / 4, ``max_tokens`` or ``assumed_output_tokens``). A call whose reply was lost (maybe
executed) stays counted at its worst case; one that failed before any work is released. A call
with no price known is not bounded by any budget (the plan lists it as "no price known").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .limits import admitted, expect_admission  # (each call's admission: set, awaited)
from .prices import BATCH_FACTOR, Prices, estimate_call, spend_cost

__all__ = ["Budget", "Hold", "OverSpend", "SpendGuard", "admitted", "expect_admission"]


class OverSpend(Exception):
    """The call would take spend over a budget: it is not sent."""


@dataclass(frozen=True)
class Budget:
    """One bound on spend: ``limit`` over a ``scope`` ("run", "day", "month"), with what that
    scope spent before this run (``before``) and where the limit was set (``source``)."""

    limit: float
    source: str
    scope: str = "run"
    before: float = 0.0


@dataclass
class Hold:
    """One call's worst case, held from ``reserve`` to ``settle``."""

    provider: str
    worst: float | None
    batch: bool = False  # a line of a batch made (held until the batch answers it)


@dataclass
class SpendGuard:
    """A run's spending against its budgets: calls admitted only while their worst case fits."""

    prices: Prices
    budgets: list[Budget]
    on_stop: Callable[[str], None] = lambda _why: None
    spent: float = 0.0  # real spend of this run's completed calls (and lost replies' worst)
    in_flight: float = 0.0  # worst cases of the calls out now
    # Worst cases of the lines of batches this run made, until their answers are back: out as
    # the calls in flight are, but a call never waits for them (a batch may take hours).
    in_batches: float = 0.0
    # Worst cases of the lines of live batches made before this run started (any run's): they
    # will be paid, so the day's and the month's budgets count them until their answers are in.
    carried: float = 0.0
    unpriced: int = 0  # calls sent with no price known
    stopped: str | None = field(default=None, init=False)  # why the run stopped
    refusal: str = field(default="", init=False)  # what a call refused says
    _event: asyncio.Event | None = field(default=None, init=False, repr=False)

    @property
    def _unit(self) -> str:
        return f" {self.prices.currency}" if self.prices.currency else ""

    def reserve(
        self,
        provider: str,
        model: str | None,
        kind: str,
        *,
        input_chars: int | None = None,
        max_tokens: int | None = None,
        size: str | None = None,
        quality: str | None = None,
        batch: bool = False,
        what: str = "the next call",
    ) -> Hold:
        """Hold the call's worst case (``batch``: at the batch price, a line of a batch about
        to be made). Raises OverSpend (and stops the run, saying ``what`` was not sent) when
        spend plus the calls in flight plus this one would be over a budget."""
        if self.stopped is not None:
            raise OverSpend(self.refusal)
        worst = estimate_call(
            self.prices, provider, model, kind,
            input_chars=input_chars, max_tokens=max_tokens, size=size, quality=quality,
        )  # fmt: skip
        if worst is not None and batch:
            row = self.prices.row(provider, model) or {}
            worst *= float(row.get("batch_factor", BATCH_FACTOR))
        if worst is None:
            self.unpriced += 1
            return Hold(provider, None)
        for budget in self.budgets:
            total = self._held(budget) + self.in_flight + worst
            if total > budget.limit + 1e-12:
                # The run's reason says it all once; each call refused names the budget.
                self.stopped = self._why(budget, worst, what)
                self.refusal = (
                    f"not sent: budget {budget.limit:g}{self._unit} ({budget.source}) reached"
                )
                self.on_stop(self.stopped)
                raise OverSpend(self.refusal)
        if batch:
            self.in_batches += worst
        else:
            self.in_flight += worst
        return Hold(provider, worst, batch)

    async def admit(
        self,
        provider: str,
        model: str | None,
        kind: str,
        *,
        input_chars: int | None = None,
        max_tokens: int | None = None,
        size: str | None = None,
        quality: str | None = None,
    ) -> Hold:
        """``reserve``, except that a call over a budget only because of the calls in flight
        waits for them to end (their real spend is mostly below their worst case) and is then
        judged again: the run stops only when what was spent plus this call's worst case is
        over a budget. Raises OverSpend."""
        while True:
            if self.stopped is not None:
                raise OverSpend(self.refusal)
            worst = estimate_call(
                self.prices, provider, model, kind,
                input_chars=input_chars, max_tokens=max_tokens, size=size, quality=quality,
            )  # fmt: skip
            # (a batch's lines are not waited for: ``_held`` counts them)
            waits = worst is not None and self.in_flight > 0 and all(
                self._held(b) + worst <= b.limit + 1e-12 for b in self.budgets
            ) and any(
                self._held(b) + self.in_flight + worst > b.limit + 1e-12 for b in self.budgets
            )  # fmt: skip
            if not waits:
                return self.reserve(
                    provider, model, kind, input_chars=input_chars, max_tokens=max_tokens,
                    size=size, quality=quality,
                )  # fmt: skip
            await self._settled().wait()

    def _held(self, budget: Budget) -> float:
        """What ``budget`` counts besides the calls in flight: spent before and by this run, the
        lines of this run's batches and (for a day or a month) of earlier live batches."""
        carried = self.carried if budget.scope != "run" else 0.0
        return budget.before + self.spent + self.in_batches + carried

    def _settled(self) -> asyncio.Event:
        """Set at the next ``settle`` (one event per wait round, made in the running loop)."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def settle(
        self, hold: Hold, spend: Mapping[str, Any] | None, *, maybe_executed: bool = False
    ) -> float | None:
        """Release ``hold``: its call completed with ``spend`` (its usage record), failed before
        any work (None), or lost its reply (``maybe_executed``: counted at its worst case).
        Returns the call's real cost (None: no price known)."""
        if hold.worst is not None and hold.batch:
            self.in_batches = max(0.0, self.in_batches - hold.worst)
        elif hold.worst is not None:
            self.in_flight = max(0.0, self.in_flight - hold.worst)
        cost: float | None = None
        if spend is not None:
            cost = spend_cost(self.prices, hold.provider, spend)
            # Priced by the plan's row but not by its usage (a rate missing for cache writes):
            # its worst case stands in, so a budget still bounds it.
            self.spent += cost if cost is not None else (hold.worst or 0.0)
        elif maybe_executed and hold.worst is not None:
            self.spent += hold.worst
        if self._event is not None:  # the calls waiting for this one are judged again
            self._event.set()
            self._event = None
        return cost

    def _why(self, budget: Budget, worst: float, what: str) -> str:
        unit = self._unit
        scope = {"run": "this run", "day": "today", "month": "this month"}[budget.scope]
        spent = budget.before + self.spent
        out = self._held(budget) - spent + self.in_flight
        return (
            f"budget {budget.limit:g}{unit} ({budget.source}) reached: {scope} spent "
            f"{spent:.4g}{unit}, {out:.4g}{unit} in flight, and {what} may cost "
            f"{worst:.4g}{unit}; it was not sent (raise the budget and apply again to resume)"
        )


def input_chars(messages: list[Mapping[str, Any]]) -> int:
    """The characters of a chat request's messages, as the plan counts a prompt's."""
    return sum(len(m.get("content") or "") for m in messages if isinstance(m.get("content"), str))
