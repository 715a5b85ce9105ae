"""What the planner works out without its own state: the provider calls one step element would
make (counted and priced by costs.py), and an element's last keyed execution (to say which key
part changed). Kept apart so planner.py stays the forecast's walk."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...providers.batchapi import batch_api_of
from ...state.batchbook import LIVE
from ...state.journal import Journal
from ...state.records import loads
from .forecast import Call

CALL_STEPS = {"llm": "text", "image": "image"}


def provider_calls(
    uses: str, get: Callable[[str], Any], providers: Any, args: Mapping[str, Any] | None
) -> list[Call]:
    """The calls of one element of a ``uses`` step (llm or image); ``get`` reads an argument
    (None when it is not known before the apply), ``args`` are all of them when known."""
    kind = CALL_STEPS[uses]
    name = get("provider")
    try:
        provider = providers.get(name if isinstance(name, str) else None)
        pname = str(provider.name)
        settings = getattr(provider, "settings", {}) or {}
        # batch mode where the provider has a batch API (else its calls go directly)
        batch = get("batch") is True and batch_api_of(provider) is not None
    except Exception:  # a provider that cannot be configured: the apply will say why
        pname, settings, batch = str(name or "default"), {}, False
    params = get("params") or {}
    model = get("model") or settings.get("model")
    if kind == "image":
        # As the providers choose: params.model, else the image model of a provider that has
        # one (OpenAI's gpt-image-1, not its text `model`), else its only model.
        chosen = params.get("model") if isinstance(params, dict) else None
        model = chosen or (
            settings.get("image_model") if "image_model" in settings else settings.get("model")
        )
        n = get("n")
        size = get("size")
        quality = params.get("quality") if isinstance(params, dict) else None
        return [
            Call(
                pname,
                model if isinstance(model, str) else None,
                kind,
                n if isinstance(n, int) else 1,
                size=size if isinstance(size, str) else None,
                quality=quality if isinstance(quality, str) else None,
                batch=batch,
            )
        ]
    chars = None
    if args is not None:
        chars = sum(len(v) for k in ("system", "prompt") if isinstance(v := args.get(k), str))
    # A provider that always sends a limit (Anthropic's max_tokens setting) is held to it when
    # the step sets none: the estimate stays an upper bound, as a running budget's worst case.
    max_tokens = get("max_tokens") or settings.get("max_tokens")
    return [
        Call(
            pname,
            model if isinstance(model, str) else None,
            kind,
            1,
            input_chars=chars,
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            batch=batch,
        )
    ]


_ANY: Any = object()  # no item given: any item's execution


def last_keyed(
    journal: Journal, pipeline: str, step_id: str, element: int, *, item: Any = _ANY
) -> Any:
    """The last execution that ran (it carries its key parts), for 'which part changed';
    with ``item``, only among that item's runs (another item's run is not this one's before)."""
    sql = (
        "SELECT e.* FROM executions e {join}WHERE e.pipeline=? AND e.step_id=? AND e.element=? "
        "AND e.key_parts IS NOT NULL AND e.status NOT IN ('running'){mine} ORDER BY e.id DESC "
        "LIMIT 1"
    )
    args: tuple[Any, ...] = (pipeline, step_id, element)
    if item is _ANY:
        sql = sql.format(join="", mine="")
    else:
        sql = sql.format(join="JOIN runs r ON r.id = e.run_id ", mine=" AND r.item IS ?")
        args = (*args, item)
    rows = journal.query(sql, args)
    return rows[0] if rows else None


def in_batch(journal: Journal, report: str | None) -> str | None:
    """The batch (runner's id) that holds the call an ``awaiting_batch`` execution waits on
    (its report names the call): one still running it, or one that answered it and whose answer
    an apply has yet to take. None: the call is in no batch (queued, never sent)."""
    call = (loads(report) or {}).get("batch_call") if report else None
    if not isinstance(call, str):
        return None
    row = journal.conn.execute(
        "SELECT b.id, b.status, i.status FROM batch_items i JOIN batches b ON b.id = i.batch_id "
        "WHERE i.key=? ORDER BY b.created_at DESC, b.rowid DESC LIMIT 1",
        (call,),
    ).fetchone()
    if row is None:
        return None
    batch_id, status, item = row
    held = (status in LIVE and item == "pending") or item == "answered"
    return str(batch_id) if held else None
