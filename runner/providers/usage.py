"""What a completed call used, in one shape for every provider: what real spend is priced from.

Each provider reports usage in its own words: OpenAI ``prompt_tokens`` (cached reads included,
counted again in ``prompt_tokens_details.cached_tokens``), Anthropic ``input_tokens`` (cache
reads and writes *not* included: ``cache_read_input_tokens``, ``cache_creation_input_tokens``),
Ollama ``prompt_eval_count``. A provider's ``usage`` keeps the names a step's output has always
had (``prompt_tokens``, ``completion_tokens``; plus ``cache_read_tokens`` and
``cache_write_tokens``, which are part of ``prompt_tokens``). ``spend_record`` turns that into
the record journaled with every completed call (the ledger's ``spend``), which
engine/plan/spend.py prices:

    {"kind": "text"|"image", "model": str|null, "input_tokens": int (uncached input),
     "output_tokens": int, "cache_read_tokens": int, "cache_write_tokens": int,
     "images": int, "batch": bool, "reported": bool,
     "size": "WxH" (images), "quality": str|null (images)}

``reported`` is False when a text call's backend said nothing of its tokens: such a call has no
price, never a price of 0. ``batch`` is True for a call answered through a batch API (its rows
priced at the batch rate: see providers/prices.py ``batch_factor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _int(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def text_usage(raw: Any, style: str) -> dict[str, int]:
    """A reply's usage object in the usage names of a step's output (see the module docstring).

    ``style``: "openai" (chat completions), "anthropic" (Messages) or "ollama".
    """
    if not isinstance(raw, dict):
        return {}
    out: dict[str, int] = {}
    if style == "anthropic":
        fresh = _int(raw, "input_tokens")
        written = _int(raw, "cache_creation_input_tokens") or 0
        read = _int(raw, "cache_read_input_tokens") or 0
        if fresh is not None:
            out["prompt_tokens"] = fresh + written + read
        if (output := _int(raw, "output_tokens")) is not None:
            out["completion_tokens"] = output
        if read:
            out["cache_read_tokens"] = read
        if written:
            out["cache_write_tokens"] = written
    elif style == "ollama":
        for src, dst in (
            ("prompt_eval_count", "prompt_tokens"),
            ("eval_count", "completion_tokens"),
        ):
            if (value := _int(raw, src)) is not None:
                out[dst] = value
    else:
        for key in ("prompt_tokens", "completion_tokens"):
            if (value := _int(raw, key)) is not None:
                out[key] = value
        details = raw.get("prompt_tokens_details")
        cached = _int(details, "cached_tokens") if isinstance(details, dict) else None
        if cached:
            out["cache_read_tokens"] = cached
    return out


def tokens_used(usage: Mapping[str, Any]) -> int:
    """Tokens a call used, for a pipeline's ``token_budget``: prompt and completion tokens
    (cache reads and writes are part of the prompt's; an image count is not a token)."""
    total = 0
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def spend_record(
    kind: str,
    usage: Mapping[str, Any],
    *,
    model: str | None,
    batch: bool = False,
    size: tuple[int, int] | None = None,
    quality: str | None = None,
) -> dict[str, Any]:
    """The uniform record of one completed call's usage, journaled with it (module docstring)."""
    prompt = _int(usage, "prompt_tokens")
    output = _int(usage, "completion_tokens")
    read = _int(usage, "cache_read_tokens") or 0
    written = _int(usage, "cache_write_tokens") or 0
    record: dict[str, Any] = {
        "kind": kind,
        "model": model,
        "input_tokens": 0 if prompt is None else max(0, prompt - read - written),
        "output_tokens": output or 0,
        "cache_read_tokens": read,
        "cache_write_tokens": written,
        "images": 1 if kind == "image" else 0,
        "batch": batch,
        # An image is priced per image; a text call needs its token counts.
        "reported": kind == "image" or (prompt is not None and output is not None),
    }
    if kind == "image":
        record["size"] = f"{size[0]}x{size[1]}" if size else None
        record["quality"] = quality
    return record
