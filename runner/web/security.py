"""Who may talk to the server: the Host it is reached by, and for changes a token and Origin.

A page from another site must not be able to drive a local runner: every request names a Host
the server answers to (which defeats DNS rebinding), and every POST carries the session token
(X-Runner-Token, embedded in the served pages) and, when the browser sends one, a same-site
Origin.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import RunnerError

TOKEN_HEADER = "x-runner-token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Forbidden(RunnerError):
    """A request without the session token, from a foreign Origin, or for an unknown Host."""

    exit_code = 2


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def _hostname(netloc: str) -> str:
    """'example.org:8765' -> 'example.org'; '[::1]:8765' -> '::1'."""
    try:
        host = urlsplit(f"//{netloc}").hostname
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return ""
    return (host or "").lower()


@dataclass
class Guard:
    """The session token and the host names this server answers to."""

    token: str
    hosts: frozenset[str] = field(default_factory=lambda: LOOPBACK_HOSTS)

    @classmethod
    def for_bind(cls, token: str, bind_host: str, extra: Iterable[str] = ()) -> Guard:
        hosts = set(LOOPBACK_HOSTS) | {h.lower() for h in extra}
        if bind_host not in ("0.0.0.0", "::", ""):
            hosts.add(bind_host.lower())
        return cls(token, frozenset(hosts))

    def check_host(self, host_header: str | None) -> None:
        """Raises Forbidden unless the Host header names this server."""
        if _hostname(host_header or "") not in self.hosts:
            raise Forbidden(
                f"host '{host_header}' is not served here",
                hint="open the address `runner serve` printed",
            )

    def check_change(self, method: str, headers: dict[str, str]) -> None:
        """Raises Forbidden for a state-changing request without the token or from elsewhere."""
        if method not in UNSAFE_METHODS:
            return
        origin = headers.get("origin")
        if origin is not None:
            try:
                parts = urlsplit(origin)
            except ValueError:
                parts = urlsplit("")
            if (
                parts.scheme not in ("http", "https")
                or parts.netloc != headers.get("host")
                or _hostname(parts.netloc) not in self.hosts
            ):
                raise Forbidden(
                    f"requests from origin '{origin}' are refused",
                    hint="use the page `runner serve` serves",
                )
        if headers.get("sec-fetch-site") == "cross-site":
            raise Forbidden("cross-site requests are refused")
        given = headers.get(TOKEN_HEADER, "")
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            raise Forbidden(
                "missing or wrong session token",
                hint=f"send the token `runner serve` printed as {TOKEN_HEADER}",
            )
