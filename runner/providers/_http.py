"""What every HTTP provider shares: the client, the request, and one way to classify failures.

Failures are classified by what the backend may have done (``runner.errors.Failure``):

- TRANSIENT, refused before any work: the connection could not be made, the request body never
  went out, or the backend answered 408, 425, 429 (rate limited), 500, 503 or another 5xx.
- PERMANENT, needs the user: any other 4xx, a 429 whose error code says the quota or billing
  limit is used up (``insufficient_quota``, ...), a reply that is not the JSON we asked for.
- MAYBE_EXECUTED, sent and the reply lost: a POST whose body went out in full and then timed out
  or lost its connection, or a 502/504/524 from a proxy in front of the backend. GET, PUT and
  DELETE are idempotent, so for them the same losses are TRANSIENT.

"The body went out in full" is known exactly, from httpcore's trace of each request, so a
refused or reset connection before that point is never mistaken for work done. The backend's own
message is kept (redacted) whatever its error shape, so the user sees why it refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import re
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

from ..errors import ProviderError
from ..state.canonical import loads_strict
from ._httpx import httpx
from .base import OPERATIONAL_SETTINGS, Capabilities, Provider, ProviderConfigError
from .limits import current_route
from .pool import (
    MAX_WAIT,
    PROBE_INTERVAL,
    Backend,
    BackendPool,
    NoBackend,
    PoolConfigError,
    parse_backends,
)
from .tracking import CallTracker

_TAG = re.compile(r"<[^>]*>")
_HIDDEN = re.compile(r"(?is)<(script|style|head)\b.*?</\1\s*>")
# Methods whose repetition is harmless: a lost reply to them is transient, never maybe-executed.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Proxies and gateways answering for a backend that may have received the request.
LOST_REPLY_STATUSES = frozenset({502, 504, 524})
# A 5xx whose words say the request itself is invalid (llama-cpp-python answers a pydantic
# validation error with HTTP 500): sending it again unchanged cannot help.
INVALID_REQUEST = re.compile(
    r"(?i)\bvalidation error|\binvalid request\b|\binput should be\b|\bunprocessable\b|"
    r"\bfield required\b|\bextra inputs are not permitted\b"
)
# Errors that answer 429 (or 403/400) but need the user to act: waiting does not help.
NEEDS_USER_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "access_terminated"}
)


@functools.cache
def tls_context() -> ssl.SSLContext:
    # Building a verifying context loads the CA bundle (~0.1 s); share one per process.
    return httpx.create_ssl_context()


@functools.cache
def _no_tls_context() -> ssl.SSLContext:
    # For a plain-http backend: verifying, but with no CA loaded, so it costs nothing to build
    # and any https URL handed to that client fails verification instead of being trusted.
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under a connection failure (a certificate that does not verify, a
    handshake the server refuses, https spoken to a plain-http port), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


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


def retry_after_of(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After``, or None."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return retry_after_seconds(headers.get("Retry-After"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def error_body(resp: httpx.Response) -> Any:
    """The error reply's JSON value, or None when it is not JSON."""
    try:
        return loads_strict(resp.content)
    except ValueError:
        return None


def error_code(body: Any) -> str | None:
    """``error.code`` (or ``error.type``) of an OpenAI-shaped error body, else None."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code = err.get("code") or err.get("type")
        return code if isinstance(code, str) else None
    return None


def backend_message(resp: httpx.Response) -> str:
    """The backend's own account of an error, whatever the shape of its body.

    OpenAI/Azure ``{error: {message, type, code, param}}``, Ollama ``{error: "..."}``,
    FastAPI/A1111 ``{detail}`` or ``{error: "HTTPException", detail, body, errors}``, ComfyUI
    ``{error: {message, details}, node_errors}``, plain text or an HTML page from a proxy.
    """
    body = error_body(resp)
    if body is None:
        text = resp.text
        if "html" in resp.headers.get("Content-Type", "").lower():
            text = _TAG.sub(" ", _HIDDEN.sub(" ", text))  # a proxy's page: keep its words
        text = " ".join(text.split())
        return text or resp.reason_phrase  # cut after redaction, in Provider.error
    if not isinstance(body, dict):
        return _text(body)
    causes: list[str] = []
    labels: list[str] = []
    err = body.get("error")
    if isinstance(err, dict):
        if err.get("message"):
            causes.append(_text(err["message"]))
        if err.get("details"):
            causes.append(_text(err["details"]))
        for name in ("code", "type", "param"):
            if isinstance(err.get(name), str) and err[name] and err[name] not in labels:
                labels.append(f"{name}: {err[name]}")
    elif isinstance(err, str) and err:
        # A bare exception class name ("HTTPException") labels the cause; a sentence is one.
        (labels if err.isidentifier() and body.get("detail") else causes).append(err)
    for name in ("detail", "message", "errors"):
        value = body.get(name)
        if value and _text(value) not in causes:
            causes.append(_text(value))
    if body.get("node_errors"):
        causes.append("node_errors: " + _text(body["node_errors"]))
    text = "; ".join(causes) or _text(body)
    if labels:
        text += f" ({', '.join(labels)})"
    return text


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



def asked_url(request: httpx.Request) -> str:
    """``METHOD scheme://host:port/path?query`` of ``request``, never its userinfo."""
    url = request.url
    host = url.netloc.decode("ascii", "replace").rpartition("@")[2]
    return f"{request.method} {url.scheme}://{host}{url.raw_path.decode('ascii', 'replace')}"

class HttpProvider(Provider):
    """A provider reached over HTTP at ``base_url``, or at a pool of backends (pool.py)."""

    default_base_url: ClassVar[str] = ""
    # Where the server is, not what it makes: moving or adding backends keeps the profile.
    operational_settings: ClassVar[frozenset[str]] = OPERATIONAL_SETTINGS | {
        "base_url",
        "base_urls",
        "backends",
        "probe_interval",
        "max_wait",
    }
    # `runner providers` GETs {backend}/{probe_path}; a protocol that reports load there says
    # how to read it in ``load_of``.
    probe_path: ClassVar[str] = ""
    _pool: BackendPool | None = None
    # (backend url, timeout) -> client, while the engine keeps clients for a run; None: one
    # client per call (a provider used outside a run closes everything it opens).
    _clients: dict[tuple[str, float], httpx.AsyncClient] | None = None

    @property
    def pool(self) -> BackendPool:
        """The backends this provider's calls are spread over (one unless configured)."""
        if self._pool is None:
            try:
                backends = parse_backends(
                    self.settings,
                    default_url=self.default_base_url,
                    default_max=self.int_setting(
                        "max_concurrency", self.default_capabilities.max_concurrency, minimum=1
                    ),
                )
            except PoolConfigError as exc:
                raise ProviderConfigError(f"provider '{self.name}': {exc}") from None
            self._pool = BackendPool(
                backends,
                probe_interval=self.float_setting("probe_interval", PROBE_INTERVAL),
                max_wait=self.float_setting("max_wait", MAX_WAIT),
                name=self.name,
                queued=lambda: self.gate.waiting,
            )
        return self._pool

    @property
    def capabilities(self) -> Capabilities:
        # max_concurrency holds per backend; the provider as a whole takes the pool's sum.
        return replace(super().capabilities, max_concurrency=self.pool.capacity)

    @property
    def base_url(self) -> str:
        """The first backend's URL."""
        return self.pool.backends[0].url

    def load_of(self, reply: Any) -> dict[str, Any] | None:
        """The load a backend reports in its answer to the probe (None: it reports none)."""
        return None

    def can_reroute(self) -> bool:
        return self.pool.healthy_count() > 0

    def keep_clients(self) -> None:
        """Keep one client (and its keep-alive connections) per backend until ``aclose``."""
        if self._clients is None:
            self._clients = {}

    async def aclose(self) -> None:
        clients, self._clients = self._clients, None
        for client in (clients or {}).values():
            await client.aclose()

    def headers(self) -> dict[str, str]:
        """Headers sent with every request (subclasses add credentials)."""
        return {"User-Agent": "runner"}

    def _new_client(self, backend: Backend, timeout: float) -> httpx.AsyncClient:
        tls = tls_context() if backend.url.startswith("https://") else _no_tls_context()
        transport = _Watched(
            httpx.AsyncHTTPTransport(verify=tls, trust_env=False), self.pool, backend
        )
        return httpx.AsyncClient(
            base_url=backend.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers=self.headers(),
            trust_env=False,
            transport=transport,
        )

    @asynccontextmanager
    async def client(
        self, timeout: float | None = None, *, backend: str | None = None
    ) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one generate call, at the least-loaded healthy backend of the pool
        (``backend``: at that one, e.g. the server that holds a remote job). Its
        ``base_url`` says which backend it is; the timeout bounds each request's connect/read.
        """
        t = timeout if timeout is not None else self.timeout
        try:
            async with self.pool.lease(backend) as chosen:
                route = current_route()
                if route is not None:
                    route.backend, route.pinned = chosen.url, backend is not None
                if self._clients is None:
                    async with self._new_client(chosen, t) as client:
                        yield client
                else:
                    shared = self._clients.get((chosen.url, t))
                    if shared is None:
                        shared = self._clients[(chosen.url, t)] = self._new_client(chosen, t)
                    yield shared
        except NoBackend as exc:  # raised only while waiting for a backend: nothing was sent
            raise self.error(str(exc), transient=False) from None

    async def send(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        *,
        tracker: CallTracker | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """One request; raises a ProviderError classified by what the backend may have done.

        ``tracker`` is told (and journals it) before the request starts going out: a crash from
        then on leaves the call marked sent, so it is never silently paid twice (tracking.py).
        """
        what = f"{method} {url}"
        sent = answering = False

        async def trace(event: str, info: dict[str, Any]) -> None:
            nonlocal sent, answering
            # Journal the attempt before its first byte goes out: journaled after the body, a
            # kill between the backend receiving it and the journal's commit left a call that
            # looked never sent, and the next apply paid for it again. The record is committed
            # (with those of the other requests starting now: one commit) before this returns.
            if tracker is not None and event.endswith("send_request_headers.started"):
                tracker.sent()
                await tracker.settled()
            elif event.endswith("send_request_body.complete"):
                sent = True  # a lost reply from here on is maybe-executed
            elif event.endswith("receive_response_headers.complete"):
                answering = True

        extensions = {**kwargs.pop("extensions", {}), "trace": trace}
        # httpx's read timeout bounds each wait for bytes, not the reply: a backend sending one
        # byte a second kept a call with timeout 10 waiting for minutes. The whole request is
        # bounded too, by the same number (none when the caller asked for no read timeout).
        limit = _whole_request_limit(client, kwargs.get("timeout", httpx.USE_CLIENT_DEFAULT))
        try:
            async with asyncio.timeout(limit):
                resp = await client.request(method, url, extensions=extensions, **kwargs)
        except TimeoutError:
            # Before the reply began this is the read timeout's case, said as it says it.
            said = (
                f"no complete reply within {limit} s (the reply came too slowly)"
                if answering
                else f"no reply within {limit} s (read timeout)"
            )
            raise self.lost(method, sent, f"{what}: {said}") from None
        except httpx.TimeoutException as exc:
            kind = type(exc).__name__.replace("Timeout", " timeout").lower().strip()
            raise self.lost(
                method, sent, f"{what}: no reply within {self._timeout_of(client)} s ({kind})"
            ) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            tls = tls_failure(exc)
            if tls is not None:  # the server answered, its certificate or TLS is wrong: no
                # waiting makes it right, so it is said at once, never probed as a backend down
                raise self.error(
                    f"{what}: TLS/certificate failure ({tls}); the connection was refused before "
                    "anything was sent",
                    transient=False,
                ) from None
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise self.lost(method, sent, f"{what}: connection failed ({detail})") from None
        except httpx.HTTPError as exc:
            raise self.error(f"{what}: {type(exc).__name__}: {exc}", transient=False) from None
        if resp.status_code >= 400:
            raise self.status_error(what, resp)
        if 300 <= resp.status_code < 400:  # (never followed: a POST is not resent elsewhere)
            location = resp.headers.get("Location") or "no Location given"
            raise self.error(
                f"{what} -> HTTP {resp.status_code}: redirected to {location}; runner does not "
                "follow redirects: set the provider's base_url to where it points",
                transient=False,
                status=resp.status_code,
            )
        return resp

    def lost(self, method: str, sent: bool, message: str) -> ProviderError:
        """The error for a request that got no reply: maybe executed if a POST went out."""
        if sent and method.upper() not in IDEMPOTENT_METHODS:
            return self.error(
                f"{message}; the request was sent, so the backend may have completed "
                "(and billed) it",
                maybe_executed=True,
            )
        return self.error(message, transient=True)

    def status_error(self, what: str, resp: httpx.Response) -> ProviderError:
        """The error for an HTTP error status, classified (see the module docstring)."""
        status = resp.status_code
        # The whole URL asked, not only the path: a base_url with the endpoint pasted in
        # (".../chat/completions/chat/completions") shows itself.
        message = f"{asked_url(resp.request)} -> HTTP {status}: {backend_message(resp)}"
        if status in LOST_REPLY_STATUSES and resp.request.method not in IDEMPOTENT_METHODS:
            return self.error(
                f"{message}; a gateway lost the backend's reply, so it may have completed "
                "(and billed) the request",
                maybe_executed=True,
                status=status,
            )
        transient = status in (408, 425, 429) or (status >= 500 and status not in (501, 505))
        if transient and error_code(error_body(resp)) in NEEDS_USER_CODES:
            transient = False
            message += " (this needs action on the account; retrying will not help)"
        elif transient and status >= 500 and INVALID_REQUEST.search(message):
            transient = False
            message += " (the server names the request as invalid; sending it again would not help)"
        return self.error(
            message,
            transient=transient,
            status=status,
            retry_after=retry_after_of(resp.headers) if transient else None,
        )

    def json_of(self, resp: httpx.Response) -> dict[str, Any]:
        """The reply's JSON object; wrong content type or malformed JSON is permanent."""
        what = f"{resp.request.method} {resp.request.url.path}"
        ctype = resp.headers.get("Content-Type", "")
        if "json" not in ctype.lower():
            raise self.error(
                f"{what}: expected a JSON reply, got content type '{ctype or 'none'}': "
                f"{self.redactor.clip(resp.text, 200)!r}",
                transient=False,
                status=resp.status_code,
            )
        try:  # strictly: a NaN or Infinity would reach the journal and every --json reader
            body = loads_strict(resp.content)
        except ValueError as exc:
            raise self.error(
                f"{what}: malformed JSON reply ({exc}): {self.redactor.clip(resp.text, 200)!r}",
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


def _whole_request_limit(client: httpx.AsyncClient, asked: Any) -> float | None:
    """Seconds the whole request (connect, send, every byte of the reply) may take: the read
    timeout asked for this request, else the client's."""
    if isinstance(asked, httpx.Timeout):
        return asked.read
    if isinstance(asked, (int, float)) and not isinstance(asked, bool):
        return float(asked)
    if asked is None:
        return None
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


def backend_of(client: httpx.AsyncClient) -> str:
    """The URL of the backend ``client`` talks to (as configured: no trailing slash)."""
    return str(client.base_url).rstrip("/")


class _Watched(httpx.AsyncBaseTransport):
    """A transport that tells the pool when its backend refuses or answers a connection."""

    def __init__(self, inner: httpx.AsyncBaseTransport, pool: BackendPool, backend: Backend):
        self.inner, self.pool, self.backend = inner, pool, backend

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if tls_failure(exc) is not None:
                raise  # it answered: its certificate is wrong, which no probe will mend
            # Nothing reached the backend: take it out, and let the call go elsewhere.
            self.pool.refused(self.backend)
            route = current_route()
            if route is not None:
                route.refused = True
            raise
        self.pool.answered(self.backend)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
