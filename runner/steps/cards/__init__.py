"""Prompt cards: a deterministic contract built from inputs, with a canonical hash and drift check.

Typical use::

    spec = load_spec("cards/render_prompt_card.yaml")
    built = build_card(spec, inputs)            # Card(card, hash); ContractViolation on bad input
    check_shape(spec, built.card, built.hash)   # [] when the stored card is well formed
    detect_drift(spec, built.card, built.hash, new_inputs)  # DriftReport
    card_block(built.card, spec.title, spec.schema_version)  # the prompt's first block
"""

from __future__ import annotations

from .build import Card, ContractViolation, build_card, card_block, card_hash
from .drift import DriftReport, changed_fields, detect_drift
from .shape import check_shape
from .spec import CardSpec, load_spec

__all__ = [
    "Card",
    "CardSpec",
    "ContractViolation",
    "DriftReport",
    "build_card",
    "card_block",
    "card_hash",
    "changed_fields",
    "check_shape",
    "detect_drift",
    "load_spec",
]
