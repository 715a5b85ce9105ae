"""Who may talk to the server, and how much they may send.

Every request but the static files needs credentials, reads as much as changes: the pages show
prompts, replies and paths, and a page that handed out the token to any GET (as a meta tag did)
let any local process approve a gate. Two kinds of credentials, as Jupyter does it:

- the session token, sent by API clients as ``X-Runner-Token`` or ``Authorization: Bearer``;
- a session cookie (HttpOnly, SameSite=Strict) that a browser receives by opening the URL
  `runner serve` prints once (``/?token=...``): the server answers with the cookie and a redirect
  to the same page without the token, so it stays out of history, Referer and the page's script.

Changes made with the cookie must also come from this server's own page (same-site Origin, or
Sec-Fetch-Site: same-origin): the cookie is what a browser sends by itself. Every request must
name a Host this server answers to (which defeats DNS rebinding).

Request bodies are limited while they are read (Content-Length first, then the bytes as they
arrive), not after the whole body sits in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...errors import RunnerError
from .responses import BodyTooLarge, Forbidden, Unauthorized, UnsafeInput, error_response

TOKEN_HEADER = "x-runner-token"
TOKEN_QUERY = "token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PUBLIC_PREFIXES = ("/static/",)  # the page's own CSS and script: nothing from the runs
MAX_BODY = 1 << 20


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


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode()
    )


def login_url(base_url: str, token: str) -> str:
    """The URL `runner serve` prints: opening it once gives the browser its session cookie."""
    return f"{base_url}?{urlencode({TOKEN_QUERY: token})}"


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

    @property
    def cookie_value(self) -> str:
        # Derived, so a cookie jar never holds the token itself.
        return hmac.new(self.token.encode(), b"runner-session-cookie", hashlib.sha256).hexdigest()

    @staticmethod
    def cookie_name(port: int | None) -> str:
        # Cookies ignore the port: two servers on one host must not overwrite each other's.
        return f"runner-session-{port or 0}"

    def set_cookie_header(self, port: int | None) -> str:
        return f"{self.cookie_name(port)}={self.cookie_value}; Path=/; HttpOnly; SameSite=Strict"

    def check_host(self, host_header: str | None) -> None:
        """Raises Forbidden unless the Host header names this server."""
        if _hostname(host_header or "") not in self.hosts:
            raise Forbidden(
                f"host '{host_header}' is not served here",
                hint="open the address `runner serve` printed",
            )

    def credentials(self, headers: dict[str, str], port: int | None) -> str | None:
        """'token' or 'cookie' for a request carrying valid credentials, else None."""
        given = headers.get(TOKEN_HEADER, "")
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            given = given or auth[7:].strip()
        if given:
            return "token" if _same(given, self.token) else None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no credential, not an error
            return None
        morsel = jar.get(self.cookie_name(port))
        if morsel is not None and _same(morsel.value, self.cookie_value):
            return "cookie"
        return None

    def check_origin(self, headers: dict[str, str], *, required: bool) -> None:
        """Raises Forbidden for a foreign Origin (or, when ``required``, none at all)."""
        if headers.get("sec-fetch-site") == "cross-site":
            raise Forbidden("cross-site requests are refused")
        origin = headers.get("origin")
        if origin is None:
            if required and headers.get("sec-fetch-site") != "same-origin":
                raise Forbidden(
                    "a change made with the session cookie must come from this server's page",
                    hint=f"API clients send the token as {TOKEN_HEADER}",
                )
            return
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

    def check(self, method: str, path: str, headers: dict[str, str], port: int | None) -> None:
        """Raises Forbidden/Unauthorized unless this request may be answered."""
        self.check_host(headers.get("host"))
        if path.startswith(PUBLIC_PREFIXES) and method in ("GET", "HEAD"):
            return
        how = self.credentials(headers, port)
        if how is None:
            wrong = headers.get(TOKEN_HEADER) or headers.get("authorization")
            raise (Forbidden if wrong else Unauthorized)(
                "wrong session token" if wrong else "this server needs its session token",
                hint="open the URL `runner serve` printed (it carries the token once), "
                f"or send the token as {TOKEN_HEADER}",
            )
        if method in UNSAFE_METHODS:
            self.check_origin(headers, required=how == "cookie")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _port(scope: Scope) -> int | None:
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else None


class GuardMiddleware:
    """Answers for the Guard: 403/401 before the app sees a request, the login redirect, and the
    body limit while the body is read."""

    def __init__(self, app: ASGIApp, guard: Guard, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.guard = guard
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        port = _port(scope)
        try:
            if self._login(scope, headers):
                await self._redirect(scope, send, port)
                return
            self.guard.check(scope["method"], scope["path"], headers, port)
            length = headers.get("content-length")
            if length is not None and (not length.isascii() or not length.isdigit()):
                raise BodyTooLarge("request Content-Length is not a number")
            if length is not None and int(length[:20]) > self.max_body:
                raise BodyTooLarge(f"request body is over {self.max_body} bytes")
        except RunnerError as exc:
            await _refuse(exc, scope, receive, send)
            return
        await self.app(scope, self._limited(receive), _unframed(send))

    def _login(self, scope: Scope, headers: dict[str, str]) -> bool:
        """A page GET carrying the right ``?token=`` (from the printed URL)."""
        if scope["method"] != "GET" or is_api(scope["path"]):
            return False
        query = scope.get("query_string", b"").decode("latin-1")
        given = dict(parse_qsl(query)).get(TOKEN_QUERY)
        if given is None:
            return False
        self.guard.check_host(headers.get("host"))
        if not _same(given, self.guard.token):
            raise Forbidden(
                "wrong session token in the URL", hint="open the URL `runner serve` printed"
            )
        return True

    async def _redirect(self, scope: Scope, send: Send, port: int | None) -> None:
        rest = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"))]
        query = urlencode([(k, v) for k, v in rest if k != TOKEN_QUERY])
        location = scope["path"] + (f"?{query}" if query else "")
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("utf-8", "surrogateescape")),
                    (b"set-cookie", self.guard.set_cookie_header(port).encode()),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                    *NO_FRAMING,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    def _limited(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(f"request body is over {limit} bytes")
            return message

        return wrapped


# No other page may frame this one (a page on another local port could overlay the buttons and
# have a reviewer approve a gate unawares): both headers, for old browsers and new.
NO_FRAMING = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
]


def _unframed(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *NO_FRAMING]}
        await send(message)

    return wrapped



def is_api(path: str) -> bool:
    """Whether ``path`` is the JSON API's (answered in JSON, errors too): ``/api`` itself is,
    as ``/api/objects/..`` normalised by a client becomes."""
    return path == "/api" or path.startswith("/api/")

async def _refuse(exc: RunnerError, scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(exc, as_html=not is_api(scope["path"]))
    if isinstance(exc, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="runner"'
    await response(scope, receive, _unframed(send))


def export_destination(text: str, *, base: Path, roots: Iterable[Path]) -> Path:
    """The folder an export from the page may write: ``text`` (relative to ``base``) once its
    symlinks are resolved must lie inside one of ``roots`` (the project, or a directory named
    on serve's command line). Raises Forbidden naming the folder as the client gave it, never
    a path from the server's disk."""
    if "\x00" in text:
        raise UnsafeInput("request field 'to' holds a NUL byte")
    try:
        text.encode("utf-8")
        dest = (base / text).resolve()
    except (UnicodeEncodeError, OSError, RuntimeError, ValueError):
        raise UnsafeInput(f"request field 'to' is not a usable folder name: {text!r}") from None
    for root in roots:
        if dest == root or dest.is_relative_to(root):
            return dest
    raise Forbidden(
        f"export folder '{text}' is outside the project",
        hint="export inside the project, or name the folder with `runner serve --export-dir`",
    )
