"""Named rule checks, one module each, registered by name in ``CHECKS``.

The built-in ones (all, any, not, rule, expr, fail, file_nonempty, choice_in, matches,
json_schema, exec and collection_has) are in ``CHECKS`` from the start; each module is imported,
and registers its check, when the check is first looked up (base.CheckRegistry).
"""

from __future__ import annotations

from typing import Any

from .base import CHECKS, CheckType, Rule, Scope, Verdict, register_check

__all__ = [
    "CHECKS",
    "CheckType",
    "CollectionQuery",
    "Rule",
    "Scope",
    "Verdict",
    "register_check",
    "set_collection_backend",
]


def __getattr__(name: str) -> Any:
    # collection_has's own names, from its module when asked for (state/collections.py)
    if name in ("CollectionQuery", "set_collection_backend"):
        from . import collection_has

        return getattr(collection_has, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
