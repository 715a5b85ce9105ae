"""Images for publishing: finalise to a compliance profile, check, preview, contact sheets."""

from __future__ import annotations
