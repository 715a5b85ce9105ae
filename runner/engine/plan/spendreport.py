"""What was actually spent (``runner costs``, the run page): every completed call's journaled
usage priced from runner.toml's ``[prices]``, added up by run, step, model, provider and day.

Beside each run's real spend stands the plan's estimate of the same calls: the cost model
``runner plan`` prices with (providers/prices.py ``estimate_call``: prompt characters / 4,
``max_tokens`` or ``assumed_output_tokens``) applied to the requests the run journaled, so the two
are comparable call for call. A call with no price known is counted apart ("no price known"),
never as 0; a free provider's (fake) calls cost 0 and say so.

Shape (``--json``)::

    {"currency": str, "since": float|null, "run": str|null,
     "total": TOTALS, "maybe_billed_calls": int,
     "by_run": [{"run_id", "pipeline", **TOTALS, "estimate": float|null}],
     "by_step": [{"run_id", "step_id", **TOTALS}], "by_model": [{"provider", "model", **TOTALS}],
     "by_provider": [{"provider", **TOTALS}], "by_day": [{"day": "YYYY-MM-DD", **TOTALS}]}
    TOTALS = {"calls", "cost", "unpriced_calls", "input_tokens", "output_tokens",
              "cache_read_tokens", "cache_write_tokens", "images", "batch_calls"}

``cost`` sums the priced calls; ``unpriced_calls`` counts those with no price known;
``maybe_billed_calls`` (beside ``total``) counts calls sent whose reply was lost: the service
may have billed them, with no usage to say how much.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ...providers.prices import Prices, estimate_call, load_prices
from ...providers.usage import TOKEN_KEYS
from ..run.spend import call_facts, priced_calls

CSV_COLUMNS = (
    "finished_at", "day", "run_id", "step_id", "key", "provider", "model", "kind",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "images",
    "batch", "cost",
)  # fmt: skip


def _totals() -> dict[str, Any]:
    return {
        "calls": 0,
        "cost": 0.0,
        "unpriced_calls": 0,
        **dict.fromkeys(TOKEN_KEYS, 0),
        "images": 0,
        "batch_calls": 0,
    }


def _add(into: dict[str, Any], row: Mapping[str, Any]) -> None:
    spend = row["spend"]
    into["calls"] += 1
    if row["cost"] is None:
        into["unpriced_calls"] += 1
    else:
        into["cost"] += row["cost"]
    for key in (*TOKEN_KEYS, "images"):
        into[key] += int(spend.get(key) or 0)
    into["batch_calls"] += 1 if spend.get("batch") else 0


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t))


def spend_rows(
    journal: Any,
    prices: Prices,
    *,
    since: float | None = None,
    run: str | None = None,
    settings_of: Callable[[str], Mapping[str, Any]] = lambda _name: {},
) -> list[dict[str, Any]]:
    """The priced calls (engine/run/spend.py ``priced_calls``), of one run when ``run``."""
    return list(priced_calls(journal, prices, since=since, settings_of=settings_of, run=run))


def spend_report(
    journal: Any,
    prices: Prices,
    *,
    since: float | None = None,
    run: str | None = None,
    settings_of: Callable[[str], Mapping[str, Any]] = lambda _name: {},
) -> dict[str, Any]:
    """The report document (module docstring) over the journal's completed calls."""
    rows = spend_rows(journal, prices, since=since, run=run, settings_of=settings_of)
    pipelines = _pipelines(journal, {r["run_id"] for r in rows})
    total = _totals()
    groups: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
        name: {} for name in ("by_run", "by_step", "by_model", "by_provider", "by_day")
    }
    estimates: dict[str, float | None] = {}
    for row in rows:
        spend = row["spend"]
        _add(total, row)
        keys = {
            "by_run": (row["run_id"],),
            "by_step": (row["run_id"], row["step_id"]),
            "by_model": (row["provider"], spend.get("model")),
            "by_provider": (row["provider"],),
            "by_day": (_day(row["finished_at"]),),
        }
        for name, key in keys.items():
            _add(groups[name].setdefault(key, _totals()), row)
        each = _estimate(prices, row, settings_of)
        run_id = row["run_id"]
        if run_id not in estimates or estimates[run_id] is not None:
            known = estimates.get(run_id, 0.0)
            estimates[run_id] = None if each is None or known is None else known + each
    names = {
        "by_run": ("run_id",),
        "by_step": ("run_id", "step_id"),
        "by_model": ("provider", "model"),
        "by_provider": ("provider",),
        "by_day": ("day",),
    }
    doc: dict[str, Any] = {
        "currency": prices.currency,
        "since": since,
        "run": run,
        "total": _rounded(total),
        "maybe_billed_calls": _maybe_billed(journal, since=since, run=run),
    }
    for name, grouped in groups.items():
        out = []
        for key, totals in grouped.items():
            entry = dict(zip(names[name], key, strict=True))
            if name == "by_run":
                entry["pipeline"] = pipelines.get(key[0])
                estimate = estimates.get(key[0])
                entry["estimate"] = None if estimate is None else round(estimate, 6)
            out.append({**entry, **_rounded(totals)})
        doc[name] = out
    return doc


def _rounded(totals: dict[str, Any]) -> dict[str, Any]:
    return {**totals, "cost": round(totals["cost"], 6)}


def _estimate(
    prices: Prices,
    row: Mapping[str, Any],
    settings_of: Callable[[str], Mapping[str, Any]],
) -> float | None:
    """The plan's estimate of one journaled call (its request as the ledger kept it)."""
    facts = call_facts(row["meta"], settings_of)
    each = estimate_call(
        prices, row["provider"], facts.model, facts.kind, input_chars=facts.input_chars,
        max_tokens=facts.max_tokens, size=facts.size, quality=facts.quality,
    )  # fmt: skip
    if each is not None and facts.batch:
        row_prices = prices.row(row["provider"], facts.model) or {}
        each *= float(row_prices.get("batch_factor", 0.5))
    return each


def _maybe_billed(journal: Any, *, since: float | None, run: str | None) -> int:
    """Calls sent whose reply was lost (maybe executed): the service may have billed them, and
    no usage says how much."""
    sql = (
        "SELECT COUNT(*) FROM calls WHERE (status='maybe_executed' OR (status='in_flight' "
        "AND submitted_at IS NOT NULL))"
    )
    args: list[Any] = []
    if since is not None:
        sql += " AND COALESCE(submitted_at, started_at) >= ?"
        args.append(since)
    if run is not None:
        sql += " AND run_id = ?"
        args.append(run)
    return int(journal.conn.execute(sql, args).fetchone()[0])


def _pipelines(journal: Any, run_ids: Iterable[str]) -> dict[str, str]:
    ids = sorted(run_ids)
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    sql = f"SELECT id, pipeline FROM runs WHERE id IN ({marks})"
    return {r[0]: r[1] for r in journal.conn.execute(sql, ids)}


def csv_rows(rows: Iterable[Mapping[str, Any]]) -> Iterable[list[Any]]:
    """One row per call, ``CSV_COLUMNS`` in order (a spreadsheet sums them as it likes)."""
    for row in rows:
        spend = row["spend"]
        yield [
            round(row["finished_at"], 3),
            _day(row["finished_at"]),
            row["run_id"],
            row["step_id"],
            row["key"],
            row["provider"],
            spend.get("model") or "",
            spend.get("kind") or "",
            *(int(spend.get(k) or 0) for k in (*TOKEN_KEYS, "images")),
            "true" if spend.get("batch") else "false",
            "" if row["cost"] is None else round(row["cost"], 6),
        ]


def run_spend_line(journal: Any, state_dir: Path, run_id: str) -> dict[str, Any] | None:
    """One run's spend as its page says it (``spend`` of the run's JSON): cost, currency,
    calls, calls with no price known, and the plan's estimate of them; None: it made no call."""
    root = state_dir.resolve().parent
    settings_of = provider_settings(root)
    doc = spend_report(journal, prices_for_state(state_dir), run=run_id, settings_of=settings_of)
    if not doc["by_run"]:
        return None
    [run] = doc["by_run"]
    keys = ("cost", "calls", "unpriced_calls", "estimate", *TOKEN_KEYS, "images", "batch_calls")
    return {"currency": doc["currency"], **{k: run[k] for k in keys}}


def prices_for_state(state_dir: Path) -> Prices:
    """The price table of the project a state belongs to (its runner.toml, found from the
    directory the state sits in)."""
    return load_prices(state_dir.resolve().parent)


def provider_settings(root: Path) -> Callable[[str], Mapping[str, Any]]:
    """The configured settings of each provider of the project at ``root`` (for calls journaled
    before their spend was: their model is the provider's default)."""
    from ...providers.config import Providers

    providers = Providers.for_dir(root, environ={})  # settings only: no secret is read

    def settings_of(name: str) -> Mapping[str, Any]:
        return dict(providers.get(name).settings)

    return settings_of
