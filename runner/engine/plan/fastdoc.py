"""What the no-op fast path knows of the pipeline document: two digests of the values read.

- ``document``: every value (source.data_digest). An edit of comments, layout, quoting or
  anchors keeps it: the compiler, which sees only the values, makes the same plan.
- ``keyed``: every value but those no key and no fully cached run depends on (a description,
  retries, timeout, concurrency, Dask resources). An edit of those keeps it: every key is what it
  was, but the new values must still be valid, so the caller checks the document against the
  pipeline schema (which checks all of these values fully) before trusting it.

Digests are remembered by the sha256 of the bytes: an apply whose check parsed the file records
its fingerprint without a second parse.
"""

from __future__ import annotations

import hashlib
from typing import Any

Digests = tuple[str | None, str | None]  # (document, keyed)

# Top-level and per-step keys that change neither a key nor what a fully cached run does.
NEUTRAL_TOP = frozenset({"description"})
NEUTRAL_STEP = frozenset({"description", "retries", "timeout", "concurrency", "resources"})

_KNOWN: dict[str, Digests] = {}


def remember(sha: str, digests: Digests) -> None:
    if len(_KNOWN) >= 16:
        _KNOWN.clear()
    _KNOWN[sha] = digests


def of_values(data: Any) -> Digests:
    from ...source.document import data_digest

    return data_digest(data), data_digest(_keyed(data))


def of_bytes(data: bytes) -> Digests:
    """The digests of a file's bytes; (None, None) when they are not a YAML document."""
    from ...source.document import document_data, keep_parsed

    sha = hashlib.sha256(data).hexdigest()
    known = _KNOWN.get(sha)
    if known is not None:
        return known
    try:
        parsed = document_data(data.decode("utf-8"))
    except UnicodeDecodeError:
        parsed = None
    if parsed is not None:
        keep_parsed(sha, parsed)  # a compile that follows reads these values, not the text
    digests = (None, None) if parsed is None else of_values(parsed)
    remember(sha, digests)
    return digests


def of_plan(plan: Any) -> tuple[str, Digests]:
    """(sha256 of the bytes, digests) of what ``plan`` was compiled from."""
    src = plan.doc.src
    if src.sha256 is not None:
        digests = of_values(plan.doc.data)
        remember(src.sha256, digests)
        return src.sha256, digests
    data = plan.file.read_bytes()  # a plan compiled from text, not read from its file
    return hashlib.sha256(data).hexdigest(), of_bytes(data)


def _keyed(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    out = {k: v for k, v in data.items() if k not in NEUTRAL_TOP}
    steps = out.get("steps")
    if isinstance(steps, dict):
        out["steps"] = {
            sid: (
                {k: v for k, v in raw.items() if k not in NEUTRAL_STEP}
                if isinstance(raw, dict)
                else raw
            )
            for sid, raw in steps.items()
        }
    return out
