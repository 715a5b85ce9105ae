"""What every HTTP provider shares: one httpx client per call and one way to classify failures.

Transient (worth retrying): 408, 429 (with Retry-After), 5xx, connect/read/write timeouts, a
connection refused or reset. Permanent: any other 4xx, a body that is not the JSON we asked for,
a reply of the wrong content type. The backend's own message is kept (redacted) so the user sees
why the backend refused.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx

from ..errors import ProviderError
from .base import Provider

MAX_MESSAGE_CHARS = 600


@functools.cache
def tls_context() -> ssl.SSLContext:
    # Building a verifying context loads the CA bundle (~0.1 s); share one per process.
    return httpx.create_ssl_context()


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backend_message(resp: httpx.Response) -> str:
    """The human part of an error body: error.message, error, detail, message, or the text."""
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        text = resp.text.strip()
        return text[:MAX_MESSAGE_CHARS] or resp.reason_phrase
    parts: list[str] = []
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            parts.append(str(err.get("message") or err.get("type") or json.dumps(err)))
        elif err:
            parts.append(str(err))
        for extra in ("detail", "message", "errors"):
            if body.get(extra) and not parts:
                v = body[extra]
                parts.append(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
        if body.get("node_errors"):
            parts.append("node_errors: " + json.dumps(body["node_errors"], sort_keys=True))
    if not parts:
        parts.append(json.dumps(body, sort_keys=True))
    return " ".join(parts)[:MAX_MESSAGE_CHARS]


def b64decode(value: Any, what: str) -> bytes:
    """Decode base64 (optionally a data: URL); raises ValueError with ``what`` on bad input."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is not a base64 string")
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class HttpProvider(Provider):
    """A provider reached over HTTP at ``base_url``."""

    default_base_url: ClassVar[str] = ""

    @property
    def base_url(self) -> str:
        return self.str_setting("base_url", self.default_base_url).rstrip("/")

    def headers(self) -> dict[str, str]:
        """Headers sent with every request (subclasses add credentials)."""
        return {"User-Agent": "runner"}

    @asynccontextmanager
    async def client(self, timeout: float | None = None) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one generate call; the timeout bounds each request's connect/read."""
        t = timeout if timeout is not None else self.timeout
        limits = httpx.Timeout(t, connect=min(t, 10.0))
        async with httpx.AsyncClient(
            base_url=self.base_url,
            timeout=limits,
            headers=self.headers(),
            trust_env=False,
            verify=tls_context(),
        ) as client:
            yield client

    async def send(
        self, client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
    ) -> httpx.Response:
        """One request; raises a classified ProviderError for transport and HTTP failures."""
        what = f"{method} {url}"
        try:
            resp = await client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            kind = type(exc).__name__.replace("Timeout", " timeout").lower().strip()
            raise self.error(
                f"{what}: no reply within {self._timeout_of(client)} s ({kind})", transient=True
            ) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise self.error(
                f"{what}: connection failed ({type(exc).__name__}: {exc})", transient=True
            ) from None
        except httpx.HTTPError as exc:
            raise self.error(f"{what}: {type(exc).__name__}: {exc}", transient=False) from None
        if resp.status_code >= 400:
            raise self.status_error(what, resp)
        return resp

    def status_error(self, what: str, resp: httpx.Response) -> ProviderError:
        status = resp.status_code
        transient = status in (408, 429) or status >= 500
        retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
        return self.error(
            f"{what} -> HTTP {status}: {backend_message(resp)}",
            transient=transient,
            status=status,
            retry_after=retry_after if transient else None,
        )

    def json_of(self, resp: httpx.Response) -> dict[str, Any]:
        """The reply's JSON object; wrong content type or malformed JSON is permanent."""
        what = f"{resp.request.method} {resp.request.url.path}"
        ctype = resp.headers.get("Content-Type", "")
        if "json" not in ctype.lower():
            raise self.error(
                f"{what}: expected a JSON reply, got content type '{ctype or 'none'}': "
                f"{resp.text[:200]!r}",
                transient=False,
                status=resp.status_code,
            )
        try:
            body = resp.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise self.error(
                f"{what}: malformed JSON reply ({exc}): {resp.text[:200]!r}",
                transient=False,
                status=resp.status_code,
            ) from None
        if not isinstance(body, dict):
            raise self.error(
                f"{what}: expected a JSON object, got {type(body).__name__}",
                transient=False,
                status=resp.status_code,
            )
        return body

    def bad_reply(self, what: str, problem: str) -> ProviderError:
        """A reply that parsed but lacks what the protocol promises (permanent)."""
        return self.error(f"{what}: unexpected reply: {problem}", transient=False)

    @staticmethod
    def _timeout_of(client: httpx.AsyncClient) -> float | None:
        return client.timeout.read


def usage_ints(raw: Any, mapping: dict[str, str]) -> dict[str, int]:
    """Pick integer counters out of a backend's usage object, renamed by ``mapping``."""
    out: dict[str, int] = {}
    if isinstance(raw, dict):
        for src, dst in mapping.items():
            v = raw.get(src)
            if isinstance(v, int) and not isinstance(v, bool):
                out[dst] = v
    return out
