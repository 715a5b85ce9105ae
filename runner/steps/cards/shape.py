"""Strict shape check of a stored card against its spec: every problem, not just the first."""

from __future__ import annotations

import re
from typing import Any

from ._types import type_problem
from .spec import CardSpec

HASH_RE = re.compile(r"[0-9a-f]{16}")


def hash_problem(value: Any, label: str = "hash") -> str | None:
    """Why ``value`` is not a card hash (exactly 16 lowercase hex characters), or None."""
    if not isinstance(value, str) or HASH_RE.fullmatch(value) is None:
        return f"{label} {value!r} must be exactly 16 lowercase hex characters"
    return None


def check_shape(spec: CardSpec, card: Any, hash: Any) -> list[str]:
    """Problems with a stored card and its hash; an empty list means the shape is valid.

    Checks: the card is an object; ``schema_version`` is an int (not a bool) equal to the spec's;
    the key group and every declared field are present with their declared types (enums
    enforced); no undeclared keys but the spec's excluded keys; the hash (and the in-card hash
    under ``hash_key``, when present) is 16 lowercase hex characters.
    """
    problems: list[str] = []
    hp = hash_problem(hash)
    if hp:
        problems.append(hp)
    if not isinstance(card, dict):
        problems.append(f"card must be an object, got {type(card).__name__}")
        return problems
    if "schema_version" not in card:
        problems.append("schema_version is missing")
    else:
        sv = card["schema_version"]
        if type(sv) is not int:
            problems.append(f"schema_version {sv!r} must be an int (a bool is not an int)")
        elif sv != spec.schema_version:
            problems.append(f"schema_version {sv} != {spec.schema_version} (the spec's)")
    for gname, defs in spec.groups.items():
        group = card.get(gname)
        if gname not in card:
            problems.append(f"{gname} is missing")
            continue
        if not isinstance(group, dict):
            problems.append(f"{gname} must be an object, got {type(group).__name__}")
            continue
        for fd in defs:
            if fd.name not in group:
                problems.append(f"{fd.path} is missing")
                continue
            problem = type_problem(group[fd.name], fd.type, fd.allowed, fd.nullable)
            if problem:
                problems.append(f"{fd.path} {problem}")
        declared = {fd.name for fd in defs}
        problems.extend(f"{gname}.{k} is not a declared field" for k in group if k not in declared)
    known = {"schema_version", *spec.groups, *spec.hash_excluded}
    problems.extend(f"{k} is not a declared field" for k in card if k not in known)
    if spec.hash_key and spec.hash_key in card:
        hp = hash_problem(card[spec.hash_key], spec.hash_key)
        if hp:
            problems.append(hp)
    return problems
