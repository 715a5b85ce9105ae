"""Measure an encoded image and check it against a profile's rules.

The report is plain data (stored with each final, shown by ``runs show --json``): every rule with
its measured value, its expected text and whether it passed, plus one reason line naming the
failed rules, e.g. "bytes 2200000 >= limit 2097152".
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, UnidentifiedImageError

from ...errors import ExpressionError
from .profiles import Profile

# Pillow's format names -> the file-type names profiles use.
_FILE_TYPES = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp"}


@dataclass(frozen=True)
class Measured:
    """What the rules can read about an encoded image."""

    width: int
    height: int
    bytes: int
    format: str  # file-type name: jpg, png, gif, webp (or Pillow's name lower-cased)

    @property
    def aspect(self) -> float:
        return round(self.width / self.height, 4) if self.height else 0.0

    def as_context(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "aspect": self.aspect,
            "bytes": self.bytes,
            "format": self.format,
        }


@dataclass(frozen=True)
class RuleResult:
    name: str
    measured: Any
    expected: str
    passed: bool
    reason: str = ""  # set when the rule failed

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "expected": self.expected,
            "passed": self.passed,
        }


@dataclass(frozen=True)
class Report:
    """The outcome of checking one image against one profile."""

    profile: str
    compliant: bool
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.rules if not r.passed]

    @property
    def reason(self) -> str:
        """The failed rules as one line ("" when compliant)."""
        return "; ".join(r.reason for r in self.failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "compliant": self.compliant,
            "reason": self.reason,
            "rules": [r.to_json() for r in self.rules],
        }


def measure(data: bytes) -> Measured:
    """Read the size and format of encoded image bytes (header only).

    Raises ValueError when the bytes are not an image Pillow can identify.
    """
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            kind = img.format or "unknown"
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"cannot measure image: {exc}") from None
    return Measured(width, height, len(data), _FILE_TYPES.get(kind, kind.lower()))


def check(measured: Measured, profile: Profile) -> Report:
    """Evaluate every rule of ``profile`` over ``measured``; never raises for a failed rule.

    A rule whose expression cannot be evaluated counts as failed, with the error as its reason.
    """
    context = measured.as_context()
    results = []
    for rule in profile.rules:
        try:
            value = rule.value.evaluate(context)
            passed = bool(rule.expr.evaluate(context))
            reason = "" if passed else f"{rule.name} {_show(value)} {rule.fail}"
        except ExpressionError as exc:
            value, passed, reason = None, False, f"{rule.name}: {exc.message}"
        results.append(RuleResult(rule.name, value, rule.expect, passed, reason))
    return Report(profile.name, all(r.passed for r in results), results)


def check_bytes(data: bytes, profile: Profile) -> Report:
    """Measure ``data`` and check it against ``profile``."""
    return check(measure(data), profile)


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
