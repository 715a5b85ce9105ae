"""runner: a declarative, journaled pipeline runner for generative-AI production work."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
