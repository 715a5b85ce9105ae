"""Images for publishing: finalise to a compliance profile, check it, preview it, sheet it.

``finalize`` (Pillow work, synchronous: run it in a worker thread) turns raw provider bytes into
a final for a ``Profile`` loaded by ``load_profile``; ``check`` / ``check_bytes`` give the
compliance ``Report``; ``render_preview`` draws tiles in a terminal; ``make_contact_sheet``
writes a PNG grid.
"""

from __future__ import annotations

from .compliance import Measured, Report, RuleResult, check, check_bytes, measure
from .contact_sheet import make_contact_sheet, sheet_layout
from .finalize import Finalized, FinalizeError, finalize
from .preview import Tile, caption_for, render_grid, render_preview, render_table, supports_color
from .profiles import Profile, Rule, known_profiles, load_profile

__all__ = [
    "FinalizeError",
    "Finalized",
    "Measured",
    "Profile",
    "Report",
    "Rule",
    "RuleResult",
    "Tile",
    "caption_for",
    "check",
    "check_bytes",
    "finalize",
    "known_profiles",
    "load_profile",
    "make_contact_sheet",
    "measure",
    "render_grid",
    "render_preview",
    "render_table",
    "sheet_layout",
    "supports_color",
]
