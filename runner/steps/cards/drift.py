"""Drift: would the card still be built the same from the current inputs?

The stored card is shape-checked, its stored hash checked against its content, then the card is
rebuilt from the current inputs and the hashes compared; the report names the fields that changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...state.canonical import CanonicalError, prepare
from .build import ContractViolation, build_card, card_hash
from .shape import check_shape
from .spec import CardSpec


@dataclass(frozen=True)
class DriftReport:
    """``problems`` non-empty: the stored card is invalid (or the current inputs break the
    contract) and nothing was compared. Otherwise ``drifted`` tells whether the rebuilt card's hash
    differs, and ``fields`` lists the dotted paths that changed, in spec order."""

    drifted: bool
    fields: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stored_hash: str | None = None
    current_hash: str | None = None


def changed_fields(spec: CardSpec, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Dotted paths of declared fields (and ``schema_version``) whose canonical values differ."""
    a = prepare(dict(old), exclude=spec.hash_excluded, unordered=spec.unordered)
    b = prepare(dict(new), exclude=spec.hash_excluded, unordered=spec.unordered)
    out = ["schema_version"] if a.get("schema_version") != b.get("schema_version") else []
    for fd in spec.fields():
        ga, gb = a.get(fd.group), b.get(fd.group)
        va = ga.get(fd.name) if isinstance(ga, dict) else None
        vb = gb.get(fd.name) if isinstance(gb, dict) else None
        if va != vb or type(va) is not type(vb):
            out.append(fd.path)
    return out


def detect_drift(
    spec: CardSpec, stored_card: Any, stored_hash: Any, current_inputs: Mapping[str, Any]
) -> DriftReport:
    """Check the stored card, rebuild it from ``current_inputs`` and report what drifted."""
    stored = stored_hash if isinstance(stored_hash, str) else None
    problems = check_shape(spec, stored_card, stored_hash)
    if not problems:
        try:
            own = card_hash(spec, stored_card)
        except CanonicalError as exc:
            problems.append(f"card is not canonical JSON: {exc}")
        else:
            if own != stored_hash:
                problems.append(
                    f"stored hash {stored_hash} does not match the stored card "
                    f"(its content hashes to {own})"
                )
    if problems:
        return DriftReport(drifted=False, problems=problems, stored_hash=stored)
    try:
        current = build_card(spec, current_inputs)
    except ContractViolation as exc:
        return DriftReport(drifted=False, problems=[f"current inputs: {exc}"], stored_hash=stored)
    if current.hash == stored_hash:
        return DriftReport(drifted=False, stored_hash=stored, current_hash=current.hash)
    return DriftReport(
        drifted=True,
        fields=changed_fields(spec, stored_card, current.card),
        stored_hash=stored,
        current_hash=current.hash,
    )
