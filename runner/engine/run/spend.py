"""Real spend during a run: every completed call's usage journaled in one shape, and the run's
budgets held on it before each call is sent (providers/spendguard.py).

The ledger a step sees (recorder.JournalLedger) hands each call here: ``begin`` (as the call is
journaled) notes what it is and sets up its admission, which the call awaits once it holds its
provider's permit (``admit``: its worst case held under the budgets, after the calls in flight
when only they are in the way; over a budget a permanent ProviderError, unsent); ``complete``
adds the call's ``spend`` record (providers/usage.py) to what the ledger keeps and settles the
hold at its real price; ``fail`` releases it (a lost reply stays counted at its worst case).
No step body knows of it: what a call is, is read from the meta it is journaled with (the llm
step's ``request``; the image step's size and params; a batch line's ``batch: true``).

Budgets: ``--max-cost``, the pipeline's ``limits.max_cost`` and runner.toml ``[budget]
max_cost`` bound this run's spend; ``max_cost_per_day`` / ``max_cost_per_month`` bound the
project's spend over the local day / calendar month, counting what earlier runs spent and, until
they answer, the worst case of the requests waiting in live batches (``carried_lines``: they will
be paid). Each line of a batch this run makes is held before the batch is made
(``hold_line``, engine/run/batchdesk.py).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import ProviderError, StepFailure
from ...providers.limits import expect_admission
from ...providers.prices import BATCH_FACTOR, Prices, estimate_call, load_prices, spend_cost
from ...providers.usage import spend_record
from ...state.records import loads

if TYPE_CHECKING:  # (a run without a budget makes no guard: spendguard.py is not loaded)
    from ...providers.spendguard import Hold, SpendGuard

OVER_BUDGET_EXIT = 9  # the plan's refusal over budget has the same code (engine/plan/costs.py)
SettingsOf = Callable[[str], Mapping[str, Any]]


class CallFacts(NamedTuple):
    """What a call is, for pricing: read from the meta it is journaled with. (A NamedTuple: a
    frozen dataclass cost ~0.5 ms to make at import, of every run that calls a provider.)"""

    provider: str
    kind: str
    model: str | None
    input_chars: int | None = None
    max_tokens: int | None = None
    size: str | None = None
    quality: str | None = None
    batch: bool = False


def call_facts(meta: Mapping[str, Any], settings_of: SettingsOf) -> CallFacts:
    """The facts of a call from its ledger meta (llm: ``request``; image: ``size``/``params``)."""
    provider = str(meta.get("provider") or "")
    try:
        settings = settings_of(provider) if provider else {}
    except Exception:  # a provider that cannot be configured was never called
        settings = {}
    batch = bool(meta.get("batch"))
    request = meta.get("request")
    if isinstance(request, dict):  # an llm call: its canonical request
        model = request.get("model") or settings.get("model")
        limit = request.get("max_tokens") or settings.get("max_tokens")  # (Anthropic's: always)
        messages = request.get("messages") or []
        chars = sum(
            len(m["content"])
            for m in messages
            if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
        return CallFacts(
            provider, "text", model if isinstance(model, str) else None, chars,
            limit if isinstance(limit, int) else None, batch=batch,
        )  # fmt: skip
    raw = meta.get("params")
    params: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    model = params.get("model") or settings.get("image_model") or settings.get("model")
    size = meta.get("size")
    quality = params.get("quality")
    return CallFacts(
        provider,
        "image",
        model if isinstance(model, str) else None,
        size=f"{size[0]}x{size[1]}" if isinstance(size, list) and len(size) == 2 else None,
        quality=quality if isinstance(quality, str) else None,
        batch=batch,
    )


def line_facts(provider: Any, endpoint: str, body: Mapping[str, Any]) -> CallFacts:
    """The facts of a batch line's request (its provider's own body: OpenAI's chat or image
    request, Anthropic's Messages request), counted as ``call_facts`` counts a direct call's."""
    name = str(provider.name)
    settings: Mapping[str, Any] = getattr(provider, "settings", None) or {}
    model = body.get("model")
    if "/images/" in endpoint:
        model = model or settings.get("image_model") or settings.get("model")
        size, quality = body.get("size"), body.get("quality")
        return CallFacts(
            name, "image", model if isinstance(model, str) else None,
            size=size if isinstance(size, str) else None,
            quality=quality if isinstance(quality, str) else None, batch=True,
        )  # fmt: skip
    model = model or settings.get("model")
    limit = (
        body.get("max_tokens") or body.get("max_completion_tokens") or settings.get("max_tokens")
    )
    parts: list[Any] = [body.get("system")]
    for m in body.get("messages") or []:
        parts.append(m.get("content") if isinstance(m, dict) else None)
    return CallFacts(
        name, "text", model if isinstance(model, str) else None, sum(map(_chars, parts)),
        limit if isinstance(limit, int) else None, batch=True,
    )  # fmt: skip


def _chars(content: Any) -> int:
    """The text characters of a message's content: a string, or a list of content blocks."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(b["text"])
            for b in content
            if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return 0


class RunSpend:
    """One run's spend, call by call (see the module docstring). ``guard``: the run's budgets;
    None when it has none, so nothing is held and no call waits (each still gets its spend
    record): the guard's holds bound nothing then, and cost ~30 us a call."""

    def __init__(self, guard: SpendGuard | None, settings_of: SettingsOf) -> None:
        self.guard = guard
        self.settings_of = settings_of
        self._facts: dict[str, CallFacts] = {}
        self._holds: dict[str, Hold] = {}
        self._carried: dict[str, float] = {}  # key -> worst case of a line an earlier apply sent

    def carry(self, lines: Mapping[str, float]) -> None:
        """Count the lines of live batches made before this run (key -> worst case at the batch
        price) under the day's and the month's budgets, until each is answered."""
        assert self.guard is not None  # (carried only under a day's or a month's budget)
        self._carried = dict(lines)
        self.guard.carried = sum(self._carried.values())

    def _uncarry(self, key: str) -> None:
        worst = self._carried.pop(key, None)
        if worst is not None and self.guard is not None:
            self.guard.carried = max(0.0, self.guard.carried - worst)

    def begin(self, key: str, meta: Mapping[str, Any]) -> None:
        """Note call ``key``: its request awaits ``admit`` before it goes out (in this task).
        Raises StepFailure, nothing journaled, once the run stopped at a budget."""
        facts = call_facts(meta, self.settings_of)
        if facts.batch or self.guard is None:
            self._facts[key] = facts
            return  # answered by a batch already sent, or no budget: recorded, not reserved
        if self.guard.stopped is not None:
            raise StepFailure(f"{facts.provider}: {self.guard.refusal}")
        self._facts[key] = facts
        expect_admission(functools.partial(self.admit, key))

    async def admit(self, key: str) -> None:
        """Hold call ``key``'s worst case under the budgets as it goes out (it may wait for the
        calls out before it); raises a permanent ProviderError, unsent, over a budget."""
        facts = self._facts.get(key)
        if facts is None or key in self._holds or self.guard is None:
            return
        from ...providers.spendguard import OverSpend

        try:
            self._holds[key] = await self.guard.admit(
                facts.provider, facts.model, facts.kind, input_chars=facts.input_chars,
                max_tokens=facts.max_tokens, size=facts.size, quality=facts.quality,
            )  # fmt: skip
        except OverSpend as exc:
            raise ProviderError(f"{facts.provider}: {exc}", provider=facts.provider) from None

    def complete(self, key: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """``result`` with its ``spend`` record; the reservation settled at the real price."""
        facts = self._facts.pop(key, None)
        out = dict(result)
        if facts is None:
            return out
        spend = spend_record(
            facts.kind, _usage(result), model=facts.model, batch=facts.batch or _batch(result),
            size=_size(facts.size), quality=facts.quality,
        )  # fmt: skip
        out["spend"] = spend
        hold = self._holds.pop(key, None)
        if self.guard is None:
            return out
        if hold is not None:
            self.guard.settle(hold, spend)
        else:  # (a batch line) counted all the same
            self.guard.spent += spend_cost(self.guard.prices, facts.provider, spend) or 0.0
            self._uncarry(key)  # (its worst case, counted while it waited, is its cost now)
        return out

    def hold_line(
        self, provider: Any, endpoint: str, body: Mapping[str, Any], *, what: str
    ) -> Hold | None:
        """Hold the worst case of a line of a batch about to be made, at the batch price; None
        when it would take spend over a budget (the run stops: the line is not sent)."""
        from ...providers.spendguard import Hold, OverSpend

        facts = line_facts(provider, endpoint, body)
        if self.guard is None:  # no budget: nothing to hold it under
            return Hold(facts.provider, None, batch=True)
        try:
            return self.guard.reserve(
                facts.provider, facts.model, facts.kind, input_chars=facts.input_chars,
                max_tokens=facts.max_tokens, size=facts.size, quality=facts.quality,
                batch=True, what=what,
            )  # fmt: skip
        except OverSpend:
            return None

    def release(self, hold: Hold) -> None:
        """A batch line's answer or failure came back: its worst case is no longer in flight
        (its real cost is added as its call completes)."""
        if self.guard is not None:
            self.guard.settle(hold, None)

    def fail(self, key: str, status: str) -> None:
        self._facts.pop(key, None)
        self._uncarry(key)  # a batch line that failed is not paid
        hold = self._holds.pop(key, None)
        if hold is not None and self.guard is not None:
            self.guard.settle(hold, None, maybe_executed=status == "maybe_executed")


def _usage(result: Mapping[str, Any]) -> Mapping[str, Any]:
    usage = result.get("usage")
    return usage if isinstance(usage, dict) else {}


def _batch(result: Mapping[str, Any]) -> bool:
    meta = result.get("metadata")
    return isinstance(meta, dict) and meta.get("batch") is True


def _size(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    w, _, h = text.partition("x")
    return (int(w), int(h)) if w.isdigit() and h.isdigit() else None


# --- the run's budgets --------------------------------------------------------------------------


def run_budgets(
    prices: Prices, max_cost: float | None, pipeline_limit: float | None, pipeline: str
) -> list[tuple[float, str, str]]:
    """(limit, source, scope) of every budget set for a run of ``pipeline`` (its file's name)."""
    out: list[tuple[float, str, str]] = []
    if max_cost is not None:
        out.append((max_cost, "--max-cost", "run"))
    if pipeline_limit is not None:
        out.append((float(pipeline_limit), f"{pipeline} limits.max_cost", "run"))
    if prices.max_cost is not None:
        out.append((prices.max_cost, "runner.toml [budget] max_cost", "run"))
    if prices.max_cost_per_day is not None:
        out.append((prices.max_cost_per_day, "runner.toml [budget] max_cost_per_day", "day"))
    if prices.max_cost_per_month is not None:
        out.append((prices.max_cost_per_month, "runner.toml [budget] max_cost_per_month", "month"))
    return out


def period_starts(now: float | None = None) -> dict[str, float]:
    """The local day's and calendar month's first second (epoch seconds)."""
    t = time.localtime(now)
    day = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))
    month = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return {"day": day, "month": month}


def run_spend(
    *,
    directory: Path,
    pipeline: str,
    max_cost: float | None,
    pipeline_limit: float | None,
    journal: Any,
    settings_of: SettingsOf,
    on_stop: Callable[[str], None],
) -> RunSpend:
    """The run's spend tracker, with its budgets (none: it records spend and bounds nothing)."""
    prices = load_prices(directory)
    budgets: list[Budget] = []
    limits = run_budgets(prices, max_cost, pipeline_limit, pipeline)
    if any(scope != "run" for _limit, _source, scope in limits):
        starts = period_starts()
        before = {"day": 0.0, "month": 0.0}
        for row in priced_calls(
            journal, prices, since=min(starts.values()), settings_of=settings_of
        ):
            for scope, start in starts.items():
                if row["finished_at"] >= start:
                    before[scope] += row["cost"] or 0.0
    if not limits:
        return RunSpend(None, settings_of)
    from ...providers.spendguard import Budget, SpendGuard

    for limit, source, scope in limits:
        budgets.append(Budget(limit, source, scope, 0.0 if scope == "run" else before[scope]))
    spend = RunSpend(SpendGuard(prices, budgets, on_stop), settings_of)
    if any(b.scope != "run" for b in budgets):
        spend.carry(carried_lines(journal, prices, settings_of))
    return spend


def carried_lines(journal: Any, prices: Prices, settings_of: SettingsOf) -> dict[str, float]:
    """Each request waiting in a live batch (key -> its worst case at the batch price): it
    will be paid when its batch answers it. No price known: not counted (as a call's)."""
    from ...state.batchbook import pending_lines

    out: dict[str, float] = {}
    for key, name, endpoint, line in pending_lines(journal):
        try:
            doc = json.loads(line)
            settings = settings_of(name)
        except Exception:  # a line runner cannot read, a provider gone from runner.toml
            continue
        # OpenAI's line {custom_id, method, url, body}; Anthropic's {custom_id, params}
        body = doc.get("body") or doc.get("params") if isinstance(doc, dict) else None
        if not isinstance(body, dict):
            continue
        facts = line_facts(SimpleNamespace(name=name, settings=settings), endpoint, body)
        worst = estimate_call(
            prices, facts.provider, facts.model, facts.kind, input_chars=facts.input_chars,
            max_tokens=facts.max_tokens, size=facts.size, quality=facts.quality,
        )  # fmt: skip
        if worst is not None:
            row = prices.row(facts.provider, facts.model) or {}
            out[key] = worst * float(row.get("batch_factor", BATCH_FACTOR))
    return out


def priced_calls(
    journal: Any,
    prices: Prices,
    *,
    since: float | None = None,
    settings_of: SettingsOf,
    run: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Every completed call of the journal (since ``since``; of run ``run``), with its spend
    and cost (None: no price known). A call journaled before spend was is read from its usage."""
    sql = (
        "SELECT key, run_id, step_id, meta, result, finished_at FROM calls WHERE status='completed'"
    )
    args: list[Any] = []
    if since is not None:
        sql += " AND finished_at >= ?"
        args.append(since)
    if run is not None:
        sql += " AND run_id = ?"
        args.append(run)
    for row in journal.conn.execute(sql + " ORDER BY finished_at, rowid", args):
        key, run_id, step_id, meta_text, result_text, finished = row
        meta = loads(meta_text) or {}
        result = loads(result_text) or {}
        provider = str(meta.get("provider") or "")
        spend = result.get("spend")
        if not isinstance(spend, dict):
            facts = call_facts(meta, settings_of)
            spend = spend_record(
                facts.kind, _usage(result), model=facts.model, batch=facts.batch,
                size=_size(facts.size), quality=facts.quality,
            )  # fmt: skip
        yield {
            "key": key,
            "run_id": run_id,
            "step_id": step_id,
            "provider": provider,
            "finished_at": float(finished or 0.0),
            "spend": spend,
            "cost": spend_cost(prices, provider, spend),
            "free": prices.free(provider),
            "meta": meta,
        }
