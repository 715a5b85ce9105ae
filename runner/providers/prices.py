"""runner.toml's ``[prices]`` and ``[budget]``, and the one cost model both sides of a call use:
the plan's estimate before it is sent (and a running budget's worst case), and its real spend
once its usage is back.

```toml
[prices]
currency = "USD"                 # only a label

[prices.openai]                  # a provider name (as in [providers.<name>]); "<name>/<model>"
image = 0.04                     # rows override the provider row for that model
image_by_size = {"1024x1024" = 0.04, "1536x1024/high" = 0.25}   # "WxH" or "WxH/quality"
input_per_1k = 0.00015           # text: per 1,000 input tokens
output_per_1k = 0.0006           #        per 1,000 output tokens
cache_read_per_1k = 0.000075     # input tokens read from the provider's prompt cache
cache_write_per_1k = 0.0001875   # input tokens written to it (Anthropic charges writes)
batch_factor = 0.5               # a call answered by a batch API costs this share (default 0.5)
assumed_output_tokens = 500      # the estimate, when the step sets no max_tokens (default 500)

[budget]
max_cost = 5.0                   # one apply: its estimate up front, its real spend as it runs
max_cost_per_day = 20.0          # real spend of every run of the project, per local day
max_cost_per_month = 300.0       #                                       per calendar month
```

Prices are the user's: runner ships none. A call with no row says "no price known" (None), never
0; the built-in ``fake`` provider is free. Real spend prices each token class at its own rate: a
cache read without ``cache_read_per_1k`` at the input rate (never dearer than input), a cache
write without ``cache_write_per_1k`` has no price (Anthropic charges more than input for it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Location, UsageError
from ..source.tomlfile import loads_toml

FREE_PROVIDERS = frozenset({"fake"})
BATCH_FACTOR = 0.5  # what OpenAI's and Anthropic's batch APIs charge of the direct price
ROW_KEYS = frozenset(
    {
        "image",
        "image_by_size",
        "input_per_1k",
        "output_per_1k",
        "cache_read_per_1k",
        "cache_write_per_1k",
        "batch_factor",
        "assumed_output_tokens",
        "assumed_input_tokens",
    }
)
BUDGET_KEYS = ("max_cost", "max_cost_per_day", "max_cost_per_month")


@dataclass
class Prices:
    """runner.toml's `[prices]` and `[budget]`: per-model prices and spending limits."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    currency: str = ""
    max_cost: float | None = None
    path: Path | None = None
    max_cost_per_day: float | None = None
    max_cost_per_month: float | None = None

    def row(self, provider: str, model: str | None) -> dict[str, Any] | None:
        base = self.rows.get(provider)
        specific = self.rows.get(f"{provider}/{model}") if model else None
        if base is None and specific is None:
            return None
        return {**(base or {}), **(specific or {})}

    def free(self, provider: str) -> bool:
        """A provider that costs nothing (fake), unless runner.toml prices it."""
        return provider in FREE_PROVIDERS and self.row(provider, None) is None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def load_prices(start: Path) -> Prices:
    """The [prices] and [budget] tables of the nearest runner.toml (none: empty).

    Raises UsageError naming the file for a value that is not a non-negative number.
    """
    from .config import find_config

    path = find_config(start)
    if path is None:
        return Prices()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return Prices(path=path)  # the provider config reports a broken file with its location
    try:
        data = loads_toml(text)
    except ValueError:  # tomllib's TOMLDecodeError: reported by the provider config as well
        return Prices(path=path)
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
            ok = _number(v)
            if k == "image_by_size":
                ok = isinstance(v, dict) and all(_number(x) for x in v.values())
            if k not in ROW_KEYS or not ok:
                raise UsageError(
                    f"[prices.{name}] {k}: expected one of {', '.join(sorted(ROW_KEYS))} "
                    "with a non-negative number",
                    where=where,
                )
        rows[name] = dict(row)
    budget = data.get("budget", {})
    if not isinstance(budget, dict):
        raise UsageError("[budget] must be a table", where=where)
    unknown = sorted(set(budget) - set(BUDGET_KEYS))
    if unknown:
        raise UsageError(
            f"[budget] {', '.join(unknown)}: not a budget",
            where=where,
            hint=f"[budget] takes {', '.join(BUDGET_KEYS)}",
        )
    limits: dict[str, float | None] = {}
    for key in BUDGET_KEYS:
        value = budget.get(key)
        if value is not None and not _number(value):
            raise UsageError(f"[budget] {key} must be a non-negative number", where=where)
        limits[key] = None if value is None else float(value)
    return Prices(
        rows,
        str(raw.get("currency", "")),
        limits["max_cost"],
        path,
        limits["max_cost_per_day"],
        limits["max_cost_per_month"],
    )


def image_price(row: Mapping[str, Any], size: str | None, quality: str | None) -> float | None:
    """One image's price: by "WxH/quality", else by "WxH", else ``image``; None: unknown."""
    by_size: Mapping[str, float] = row.get("image_by_size") or {}
    each = None
    if size is not None and quality is not None:
        each = by_size.get(f"{size}/{quality}")
    if each is None and size is not None:
        each = by_size.get(size)
    if each is None:
        each = row.get("image")
    return None if each is None else float(each)


def estimate_call(
    prices: Prices,
    provider: str,
    model: str | None,
    kind: str,
    *,
    input_chars: int | None = None,
    max_tokens: int | None = None,
    size: str | None = None,
    quality: str | None = None,
) -> float | None:
    """One call's cost before it is sent, as the plan estimates it: input tokens as characters
    / 4 (``assumed_input_tokens`` when the prompt is not known yet), output as ``max_tokens``
    (else ``assumed_output_tokens``). None: no price known."""
    row = prices.row(provider, model)
    if row is None:
        return 0.0 if provider in FREE_PROVIDERS else None
    if kind == "image":
        return image_price(row, size, quality)
    if "input_per_1k" not in row and "output_per_1k" not in row:
        return None
    tokens_in = (
        math.ceil(input_chars / 4)
        if input_chars is not None
        else int(row.get("assumed_input_tokens", 1000))
    )
    tokens_out = max_tokens or int(row.get("assumed_output_tokens", 500))
    return tokens_in / 1000 * float(row.get("input_per_1k", 0.0)) + tokens_out / 1000 * float(
        row.get("output_per_1k", 0.0)
    )


def spend_cost(prices: Prices, provider: str, spend: Mapping[str, Any]) -> float | None:
    """What one completed call cost, from its journaled usage (providers/usage.py
    ``spend_record``). None: no price known (no row, a rate missing for tokens it used, or a
    backend that reported no usage), never 0 for an unknown."""
    model = spend.get("model")
    row = prices.row(provider, model if isinstance(model, str) else None)
    if row is None:
        return 0.0 if provider in FREE_PROVIDERS else None
    factor = float(row.get("batch_factor", BATCH_FACTOR)) if spend.get("batch") else 1.0
    if spend.get("kind") == "image":
        each = image_price(row, spend.get("size"), spend.get("quality"))
        if each is not None:
            return each * int(spend.get("images") or 1) * factor
    if not spend.get("reported", False):
        return None
    rates = {
        "input_tokens": row.get("input_per_1k"),
        "output_tokens": row.get("output_per_1k"),
        "cache_read_tokens": row.get("cache_read_per_1k", row.get("input_per_1k")),
        "cache_write_tokens": row.get("cache_write_per_1k"),
    }
    total = 0.0
    for name, rate in rates.items():
        count = spend.get(name) or 0
        if not count:
            continue
        if rate is None:
            return None
        total += count / 1000 * float(rate)
    if spend.get("kind") == "image" and total == 0.0:
        return None  # an image with neither an image price nor priced tokens
    return total * factor
