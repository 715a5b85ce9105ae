"""Provider calls a plan would make, and their estimated cost from runner.toml's price table.

```toml
[prices]
currency = "USD"                 # only a label

[prices.openai]                  # a provider name (as in [providers.<name>]); "<name>/<model>"
image = 0.04                     # rows override the provider row for that model
image_by_size = {"1024x1024" = 0.04, "1536x1024/high" = 0.25}   # "WxH" or "WxH/quality"
input_per_1k = 0.00015           # text: per 1,000 input tokens
output_per_1k = 0.0006           #        per 1,000 output tokens
assumed_output_tokens = 500      # when the step sets no max_tokens (default 500)

[budget]
max_cost = 5.0                   # apply refuses a plan estimated above this (also --max-cost,
                                 # or the pipeline's limits.max_cost; the lowest applies)
```

Prices are the user's: runner ships none. Input tokens are estimated as characters / 4 of the
prompt and system text when they are known before the apply; an element whose prompt depends on
an upstream result not known yet is counted with ``assumed_input_tokens`` (default 1000) and the
estimate says it is not exact. The built-in ``fake`` provider costs nothing. Calls already paid
for (finished iterations of an interrupted run) are free at apply time: the estimate is an upper
bound.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import Location, RunnerError, UsageError
from .forecast import Call, Forecast

FREE_PROVIDERS = frozenset({"fake"})


class OverBudget(RunnerError):
    """The plan's estimated cost is above a budget: refused before any provider call."""

    exit_code = 9


@dataclass
class Prices:
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    currency: str = ""
    max_cost: float | None = None
    path: Path | None = None

    def row(self, provider: str, model: str | None) -> dict[str, Any] | None:
        base = self.rows.get(provider)
        specific = self.rows.get(f"{provider}/{model}") if model else None
        if base is None and specific is None:
            return None
        return {**(base or {}), **(specific or {})}


def load_prices(start: Path) -> Prices:
    """The [prices] and [budget] tables of the nearest runner.toml (none: empty)."""
    from ...providers.config import find_config

    path = find_config(start)
    if path is None:
        return Prices()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return Prices(path=path)  # the provider config reports a broken file with its location
    where = Location(str(path))
    raw = data.get("prices", {})
    if not isinstance(raw, dict):
        raise UsageError("[prices] must be a table", where=where)
    rows: dict[str, dict[str, Any]] = {}
    for name, row in raw.items():
        if name == "currency":
            continue
        if not isinstance(row, dict):
            raise UsageError(f"[prices.{name}] must be a table", where=where)
        for k, v in row.items():
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            if k == "image_by_size":
                ok = isinstance(v, dict) and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
                    for x in v.values()
                )
            if k not in _ROW_KEYS or not ok:
                raise UsageError(
                    f"[prices.{name}] {k}: expected one of {', '.join(sorted(_ROW_KEYS))} "
                    "with a non-negative number",
                    where=where,
                )
        rows[name] = dict(row)
    budget = data.get("budget", {})
    max_cost = budget.get("max_cost") if isinstance(budget, dict) else None
    if max_cost is not None and (not isinstance(max_cost, (int, float)) or max_cost < 0):
        raise UsageError("[budget] max_cost must be a non-negative number", where=where)
    currency = raw.get("currency", "")
    return Prices(rows, str(currency), None if max_cost is None else float(max_cost), path)


_ROW_KEYS = frozenset(
    {
        "image",
        "image_by_size",
        "input_per_1k",
        "output_per_1k",
        "assumed_output_tokens",
        "assumed_input_tokens",
    }
)


@dataclass
class CallLine:
    provider: str
    model: str | None
    kind: str
    calls: int
    cost: float | None  # None: no price for it
    exact: bool  # False when some prompt was not known yet (input tokens assumed)
    free: bool = False  # a provider that costs nothing (fake), not a price of 0 in runner.toml

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
    grouped: dict[tuple[str, str | None, str], CallLine] = {}
    for call in fc.calls():
        k = (call.provider, call.model, call.kind)
        line = grouped.get(k)
        cost = _cost(call, prices)
        if line is None:
            grouped[k] = CallLine(
                *k,
                call.count,
                cost,
                call.kind == "image" or call.input_chars is not None,
                free=call.provider in FREE_PROVIDERS and prices.row(call.provider, None) is None,
            )
            continue
        line.calls += call.count
        line.cost = None if cost is None or line.cost is None else line.cost + cost
        line.exact = line.exact and (call.kind == "image" or call.input_chars is not None)
    return Estimate(list(grouped.values()), prices.currency)


def _cost(call: Call, prices: Prices) -> float | None:
    row = prices.row(call.provider, call.model)
    if row is None:
        return 0.0 if call.provider in FREE_PROVIDERS else None
    if call.kind == "image":
        by_size: Mapping[str, float] = row.get("image_by_size") or {}
        each = None
        if call.size is not None and call.quality is not None:
            each = by_size.get(f"{call.size}/{call.quality}")
        if each is None and call.size is not None:
            each = by_size.get(call.size)
        if each is None:
            each = row.get("image")
        return None if each is None else float(each) * call.count
    if "input_per_1k" not in row and "output_per_1k" not in row:
        return None
    tokens_in = (
        math.ceil(call.input_chars / 4)
        if call.input_chars is not None
        else int(row.get("assumed_input_tokens", 1000))
    )
    tokens_out = call.max_tokens or int(row.get("assumed_output_tokens", 500))
    per_call = tokens_in / 1000 * float(row.get("input_per_1k", 0.0)) + tokens_out / 1000 * float(
        row.get("output_per_1k", 0.0)
    )
    return per_call * call.count


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
