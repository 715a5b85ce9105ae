"""Keep secrets out of logs, events and error messages: every known secret value becomes ``***``.

Besides exact secret values, anything that looks like a credential header (``Authorization:
Bearer ...``, ``"api_key": "..."``) is masked too, so a backend echoing a key we did not know
about still does not leak it.

A secret is also masked as it reads encoded (``encoded_forms``): in base64 (standard and
URL-safe, wherever it starts in an encoded stream: ``Basic base64(user:key)``) and URL-encoded
(``%2B``/``%2b``, ``+`` for a space). A backend echoing the request it refused (its
``Authorization`` header, a query string) hands the key back in those forms as often as plain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
# Shorter values would mask ordinary words and numbers everywhere (a 1-7 character value:
# "1", "true", "admin"); real API keys and tokens are far longer. Documented in providers.md.
MIN_SECRET_CHARS = 8
# A piece of a secret this long at either end of a text is masked too: the text may have been
# cut (by a limit outside runner, or an old caller) right through a key.
MIN_FRAGMENT_CHARS = 6
MIN_PIECE_CHARS = 8  # ... and one this long anywhere in it
# Messages from backends are cut to this, after redaction (see ``clip``).
MAX_MESSAGE_CHARS = 600

_SENSITIVE_KEYS = r"(?i)^(authorization|proxy-authorization|api[-_]?key|x-api-key)$"
_HEADER = (
    r"(?i)\b(authorization|proxy-authorization|x-api-key|api[-_]?key)"
    r"(\"?\s*[:=]\s*\"?)(?:(bearer|basic|token)\s+)?([^\s\",}']+)"
)
_BEARER = r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    """Each pattern compiled when first used: a process that masks no header never does
    (~0.8 ms of every start-up otherwise)."""
    return re.compile(pattern)


def encoded_forms(secret: str) -> set[str]:
    """``secret`` as base64 and URL encoding show it, without itself.

    Base64 encodes three bytes as four characters, so how a secret reads inside an encoded
    stream depends on where it starts (its offset modulo 3) and the characters at its two ends
    depend on its neighbours: for each offset, the characters that only the secret's bytes decide
    (``encode(pad + secret)`` less those the pad or what follows touch). Those are in any base64
    text holding the secret at that offset, standard or URL-safe."""
    import base64  # only once a secret is known (a start-up without one: ~0.6 ms less)

    raw = secret.encode("utf-8", "surrogatepass")
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        first = -(-8 * offset // 6)  # the first character made of the secret's bits only
        last = 8 * (offset + len(raw)) // 6  # ... and one past the last
        core = encoded[first:last]
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    for url in (quote(secret, safe=""), quote_plus(secret, safe="")):
        forms |= {url, re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), url)}
    forms.discard(secret)
    return forms


class Redactor:
    """Replaces the given secret values (and credential-looking headers) with ``***``."""

    def __init__(
        self, secrets: Iterable[str] = (), *, headers: bool = True, pieces: bool = True
    ) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        found |= {e for s in found for e in encoded_forms(s) if len(e) >= MIN_SECRET_CHARS}
        # Longest first so a secret containing another is masked whole.
        self.secrets: tuple[str, ...] = tuple(sorted(found, key=len, reverse=True))
        # Credential-looking headers and keys too (a backend's messages); off for data a
        # step made (runner/source/secretmask.py), where only known values are secrets.
        self.headers = headers
        # Any 8 characters of a secret too (a backend quoting part of a key); off for data a
        # step made, where a value's pieces can be ordinary text.
        self.pieces = pieces

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        return Redactor((*self.secrets, *secrets), headers=self.headers, pieces=self.pieces)

    def redact(self, text: str) -> str:
        """``text`` with every secret and credential header value masked."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if self.headers:
            text = _compiled(_HEADER).sub(
                lambda m: f"{m[1]}{m[2]}{m[3] + ' ' if m[3] else ''}{MASK}", text
            )
            text = _compiled(_BEARER).sub(lambda m: f"{m[1]} {MASK}", text)
        if not self.secrets:
            return text
        return self._edges(self._pieces(text) if self.pieces else text)

    def clip(self, text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
        """``text`` redacted, then cut to ``limit`` characters: never the other way round,
        which leaves the head of a key that straddles the cut."""
        text = self.redact(text)
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def _pieces(self, text: str) -> str:
        """Mask every run of ``MIN_PIECE_CHARS`` or more characters copied from a secret (a
        reply quoting part of a key)."""
        spans: list[tuple[int, int]] = []
        for secret in self.secrets:
            for i in range(len(secret) - MIN_PIECE_CHARS + 1):
                piece = secret[i : i + MIN_PIECE_CHARS]
                at = text.find(piece)
                while at != -1:
                    spans.append((at, at + MIN_PIECE_CHARS))
                    at = text.find(piece, at + 1)
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out, pos = [], 0
        for start, end in merged:
            out += [text[pos:start], MASK]
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def _edges(self, text: str) -> str:
        """Mask a secret's head ending ``text`` or its tail starting it."""
        for secret in self.secrets:
            for n in range(len(secret) - 1, MIN_FRAGMENT_CHARS - 1, -1):
                if text.endswith(secret[:n]):
                    text = text[:-n] + MASK
                    break
            for n in range(len(secret) - 1, MIN_FRAGMENT_CHARS - 1, -1):
                if text.startswith(secret[-n:]):
                    text = MASK + text[n:]
                    break
        return text

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets masked in every string and sensitive key."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {
                k: MASK
                if self.headers and isinstance(k, str) and _compiled(_SENSITIVE_KEYS).match(k)
                else self.redact_json(v)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.redact_json(v) for v in value]
        return value
