"""Named rule checks, one module each, registered by name in ``CHECKS``.

Importing this package registers the built-in ones: all, any, not, rule, expr, fail,
file_nonempty, choice_in, matches, json_schema, exec and collection_has.
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported to register)
    choice_in,
    collection_has,
    compose,
    exec,
    expr,
    fail,
    file_nonempty,
    json_schema,
    matches,
)
from .base import CHECKS, CheckType, Rule, Scope, Verdict, register_check
from .collection_has import CollectionQuery, set_collection_backend

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
