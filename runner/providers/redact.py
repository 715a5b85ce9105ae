"""Keep secrets out of logs, events and error messages: every known secret value becomes ``***``.

Besides exact secret values, anything that looks like a credential header (``Authorization:
Bearer ...``, ``"api_key": "..."``) is masked too, so a backend echoing a key we did not know
about still does not leak it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter values would mask ordinary words; real API keys are far longer.
MIN_SECRET_CHARS = 4

_SENSITIVE_KEYS = re.compile(r"(?i)^(authorization|proxy-authorization|api[-_]?key|x-api-key)$")
_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization|x-api-key|api[-_]?key)"
    r"(\"?\s*[:=]\s*\"?)(?:(bearer|basic|token)\s+)?([^\s\",}']+)"
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")


class Redactor:
    """Replaces the given secret values (and credential-looking headers) with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        # Longest first so a secret containing another is masked whole.
        self.secrets: tuple[str, ...] = tuple(sorted(found, key=len, reverse=True))

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        return Redactor((*self.secrets, *secrets))

    def redact(self, text: str) -> str:
        """``text`` with every secret and credential header value masked."""
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        text = _HEADER.sub(lambda m: f"{m[1]}{m[2]}{m[3] + ' ' if m[3] else ''}{MASK}", text)
        return _BEARER.sub(lambda m: f"{m[1]} {MASK}", text)

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets masked in every string and sensitive key."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {
                k: MASK if isinstance(k, str) and _SENSITIVE_KEYS.match(k) else self.redact_json(v)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.redact_json(v) for v in value]
        return value
