"""Provider calls a plan would make, and their estimated cost from runner.toml's price table.

The price table (``[prices]``, ``[budget]``) and the cost model are providers/prices.py's: the
estimate here and a call's real spend (engine/run/spend.py) are priced by the same rows.

Input tokens are estimated as characters / 4 of the prompt and system text when they are known
before the apply; an element whose prompt depends on an upstream result not known yet is counted
with ``assumed_input_tokens`` (default 1000) and the estimate says it is not exact. The built-in
``fake`` provider costs nothing. Calls already paid for (finished iterations of an interrupted
run) are free at apply time: the estimate is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import RunnerError
from ...providers.prices import BATCH_FACTOR, FREE_PROVIDERS, Prices, estimate_call, load_prices
from .forecast import Call, Forecast

__all__ = ["FREE_PROVIDERS", "OverBudget", "Prices", "check_budget", "estimate", "load_prices"]


class OverBudget(RunnerError):
    """The plan's estimated cost is above a budget: refused before any provider call."""

    exit_code = 9


@dataclass
class CallLine:
    provider: str
    model: str | None
    kind: str
    calls: int
    cost: float | None  # None: no price for it
    exact: bool  # False when some prompt was not known yet (input tokens assumed)
    free: bool = False  # a provider that costs nothing (fake), not a price of 0 in runner.toml
    batch: bool = False  # by the provider's batch API: its batch price, and the run suspends
    waiting: str | None = None  # already in this live batch: paid there, no new cost

    def to_json(self) -> dict[str, Any]:
        cost = None if self.cost is None else round(self.cost, 6)
        return {
            "provider": self.provider,
            "model": self.model,
            "kind": self.kind,
            "calls": self.calls,
            "cost": cost,
            "exact": self.exact,
            "free": self.free,
            **({"batch": True} if self.batch else {}),  # (said only of batch calls)
            **({"waiting": self.waiting} if self.waiting else {}),
        }


@dataclass
class Estimate:
    lines: list[CallLine]
    currency: str

    @property
    def total(self) -> float:
        return sum(x.cost or 0.0 for x in self.lines)

    @property
    def unpriced(self) -> list[CallLine]:
        return [x for x in self.lines if x.cost is None]

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": [x.to_json() for x in self.lines],
            "total": round(self.total, 6),
            "currency": self.currency,
            "unpriced_calls": sum(x.calls for x in self.unpriced),
            "exact": all(x.exact for x in self.lines),
        }


def estimate(fc: Forecast, prices: Prices) -> Estimate:
    """Calls per (provider, model, kind) and their cost, from the would-run elements."""
    grouped: dict[tuple[str, str | None, str, bool, str | None], CallLine] = {}
    for call in fc.calls():
        k = (call.provider, call.model, call.kind, call.batch, call.waiting)
        line = grouped.get(k)
        cost = _cost(call, prices)
        if line is None:
            grouped[k] = CallLine(
                *k[:3],
                call.count,
                cost,
                call.kind == "image" or call.input_chars is not None,
                free=call.provider in FREE_PROVIDERS and prices.row(call.provider, None) is None,
                batch=call.batch,
                waiting=call.waiting,
            )
            continue
        line.calls += call.count
        line.cost = None if cost is None or line.cost is None else line.cost + cost
        line.exact = line.exact and (call.kind == "image" or call.input_chars is not None)
    return Estimate(list(grouped.values()), prices.currency)


def _cost(call: Call, prices: Prices) -> float | None:
    if call.waiting is not None:  # in a batch already sent: paid for there
        return 0.0
    each = estimate_call(
        prices,
        call.provider,
        call.model,
        call.kind,
        input_chars=call.input_chars,
        max_tokens=call.max_tokens,
        size=call.size,
        quality=call.quality,
    )
    if each is not None and call.batch:  # a batch API's price: batch_factor of the direct one
        row = prices.row(call.provider, call.model) or {}
        each *= float(row.get("batch_factor", BATCH_FACTOR))
    return None if each is None else each * call.count


def check_budget(est: Estimate, budgets: list[tuple[float, str]]) -> None:
    """Raise OverBudget when the estimate exceeds the lowest of ``budgets`` ((limit, source))."""
    if not budgets:
        return
    limit, source = min(budgets)
    if est.total > limit:
        raise OverBudget(
            f"the plan's estimated cost {est.total:.4g} {est.currency}".rstrip()
            + f" exceeds the budget {limit:g} ({source}); nothing was called",
            hint="see `runner plan FILE` for the calls; raise the budget or narrow the run",
        )
