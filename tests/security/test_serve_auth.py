"""`runner serve` as a real process on a 127.0.0.1 socket, attacked over raw HTTP.

Classes (each list below is the corpus; add members as they are found):
- READS: every page and API route refuses a request without credentials, and no answer
  carries the token;
- LOGIN: the printed URL gives an HttpOnly, SameSite=Strict cookie and a redirect without the
  token; wrong tokens and other servers' cookies are refused;
- CHANGES: cookie-authenticated changes need this server's Origin;
- EXPORT: writes only inside the project or an --export-dir, whatever the path spelling;
- MALFORMED: hostile input gets a 4xx, never a 500 nor a path from the server's disk;
- BODY: an oversized body is refused from its Content-Length or while it streams in.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.surfaces.test_web_api import Site, build_site

TOKEN = "serve-secret-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    site: Site
    port: int
    proc: subprocess.Popen[str]
    printed: str
    outside: Path  # an --export-dir outside the project

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()

    def cookie(self) -> str:
        status, headers, _ = self.request("GET", f"/?token={TOKEN}")
        assert status == 303
        return headers["set-cookie"].split(";", 1)[0]

    def post(self, path: str, doc: object, **headers: str) -> tuple[int, dict[str, str], bytes]:
        hdrs = {"Content-Type": "application/json", "X-Runner-Token": TOKEN, **headers}
        return self.request("POST", path, json.dumps(doc).encode(), hdrs)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    site = build_site(tmp_path_factory.mktemp("serve"))
    outside = tmp_path_factory.mktemp("named-export-dir")
    port = _free_port()
    env = {**os.environ, "RUNNER_SERVE_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "runner", "serve", "--port", str(port)]
    cmd += ["--state", str(site.state), "--export-dir", str(outside)]
    proc = subprocess.Popen(cmd, cwd=site.project.root, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    printed = proc.stderr.readline()
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, printed
            time.sleep(0.05)
    try:
        yield Server(site, port, proc, printed, outside)
    finally:
        proc.terminate()
        proc.wait(15)
        proc.stderr.close()


def _no_secrets(server: Server, body: bytes, *, paths: bool = False) -> None:
    """No token and no traceback; no server path unless ``paths`` (a page showing the state)."""
    text = body.decode("utf-8", "replace")
    assert TOKEN not in text
    assert "Traceback" not in text
    if not paths:
        assert str(server.site.project.root) not in text


def test_printed_url_carries_the_token_once(server: Server) -> None:
    assert f"http://127.0.0.1:{server.port}/?token={TOKEN}" in server.printed


READ_ROUTES = [
    "/",
    "/?awaiting=1",
    "/runs/{hero}",
    "/steps",
    "/providers",
    "/api/runs",
    "/api/runs/{hero}",
    "/api/runs/{hero}/events",
    "/api/runs/{hero}/events?stream=1",
    "/api/runs/{hero}/steps/render/output",
    "/api/steps",
    "/api/providers",
    "/api/openapi.json",
    "/api/objects/" + "0" * 64,
    "/no/such/page",
]


@pytest.mark.parametrize("route", READ_ROUTES)
def test_reads_need_credentials(server: Server, route: str) -> None:
    path = route.format(hero=server.site.hero)
    for headers in (
        {},
        {"X-Runner-Token": "wrong"},
        {"Authorization": "Bearer wrong"},
        {"Cookie": "runner-session-0=" + "0" * 64},
        {"Cookie": f"runner-session-{server.port}=" + TOKEN},  # the token is not the cookie
        {"Cookie": '"; \x7f =;;'},
    ):
        status, _, body = server.request("GET", path, headers=headers)
        assert status in (401, 403), (path, headers, status)
        _no_secrets(server, body)
    ok, _, body = server.request("GET", path, headers={"Cookie": server.cookie()})
    assert ok in (200, 404), (path, ok)
    _no_secrets(server, body, paths=True)


def test_static_files_need_no_credentials_and_hold_no_token(server: Server) -> None:
    for path in ("/static/app.js", "/static/app.css"):
        status, _, body = server.request("GET", path)
        assert status == 200
        _no_secrets(server, body)


def test_login_sets_a_strict_httponly_cookie_and_drops_the_token(server: Server) -> None:
    hero = server.site.hero
    status, headers, _ = server.request("GET", f"/runs/{hero}?token={TOKEN}&x=1")
    assert status == 303
    assert headers["location"] == f"/runs/{hero}?x=1"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert headers["referrer-policy"] == "no-referrer"
    assert cookie.startswith(f"runner-session-{server.port}=")
    bad, _, body = server.request("GET", "/?token=wrong")
    assert bad == 403 and b"set-cookie" not in body.lower()
    # the token only logs in on pages; on the API it is a header, never a URL to log
    api, _, _ = server.request("GET", f"/api/runs?token={TOKEN}")
    assert api == 401
    rebound, _, _ = server.request("GET", f"/?token={TOKEN}", headers={"Host": "evil.example"})
    assert rebound == 403


def test_cookie_changes_need_this_servers_origin(server: Server) -> None:
    url = f"/api/runs/{server.site.hero}/pick"
    cookie = server.cookie()
    body = json.dumps({"which": "1"}).encode()
    base = {"Cookie": cookie, "Content-Type": "application/json"}
    origin = f"http://127.0.0.1:{server.port}"
    for extra in (
        {},  # a form post from a tool that sends the cookie but no Origin
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": origin, "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        status, _, _ = server.request("POST", url, body, {**base, **extra})
        assert status == 403, extra
    for extra in ({"Origin": origin}, {"Sec-Fetch-Site": "same-origin"}):
        status, _, text = server.request("POST", url, body, {**base, **extra})
        assert status == 200, (extra, text)


EXPORT_OUTSIDE = [
    "/tmp/runner-export-escape",
    "../escape",
    "a/../../escape",
    "link-out",  # a symlink inside the project pointing out of it
    "link-out/deeper",
    "/",
    "/etc",
]


@pytest.mark.parametrize("to", EXPORT_OUTSIDE)
def test_export_stays_inside_the_project(server: Server, to: str) -> None:
    root = server.site.project.root
    link = root / "link-out"
    if not link.is_symlink():
        link.symlink_to(server.outside.parent / "not-named")
    status, _, body = server.post(f"/api/runs/{server.site.hero}/export", {"to": to})
    assert status == 403, body
    _no_secrets(server, body)
    assert not Path("/tmp/runner-export-escape").exists()
    assert not (server.outside.parent / "not-named").exists()
    assert not (root.parent / "escape").exists()


def test_export_to_a_named_dir_and_inside_works(server: Server) -> None:
    for to in (str(server.outside / "finals"), "inside/finals"):
        status, _, body = server.post(f"/api/runs/{server.site.hero}/export", {"to": to})
        assert status == 200, body
        assert json.loads(body)["files"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_export_target_is_a_4xx_without_paths(server: Server) -> None:
    locked = server.site.project.root / "locked"
    locked.mkdir(exist_ok=True)
    locked.chmod(0o500)
    try:
        status, _, body = server.post(f"/api/runs/{server.site.hero}/export", {"to": "locked/x"})
    finally:
        locked.chmod(0o700)
    assert status == 403
    _no_secrets(server, body)


def test_export_onto_a_file_is_a_4xx_without_paths(server: Server) -> None:
    (server.site.project.root / "a-file").write_text("x")
    status, _, body = server.post(f"/api/runs/{server.site.hero}/export", {"to": "a-file/sub"})
    assert status == 403, body
    _no_secrets(server, body)


ALL = ("pick", "export", "iterate", "gates/review/decide")
MALFORMED_BODIES: list[tuple[tuple[str, ...], bytes]] = [
    (ALL, b'{"to": "\\ud800", "which": "\\ud800", "vars": {"\\udfff": 1}}'),  # lone surrogates
    (("export",), b'{"to": "x\\u0000y"}'),
    (("pick",), b'{"which": "' + b"9" * 5000 + b'"}'),
    (("pick",), b'{"which": "\xc2\xb2"}'),  # '\u00b2' is a digit to str.isdigit, not to int()
    (("export",), b'{"to": ["a"]}'),
    (ALL, b"[" * 100_000 + b"]" * 100_000),  # 100k-deep JSON
    (ALL, b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
    (ALL, b"\xff\xfe{}"),  # not UTF-8
    (ALL, b"1e999999"),
    (ALL, b'"just a string"'),
    # numbers JSON has not (Python's json reads them; the journal refuses them)
    (("gates/review/decide",), b'{"decision": "revise", "input": {"x": NaN}, "resume": false}'),
    (("gates/review/decide",), b'{"decision": "approve", "comment": -Infinity, "resume": false}'),
    (("iterate",), b'{"n": 1, "vars": {"mood": 1e400}}'),
    (ALL, b'{"which": Infinity, "to": NaN}'),
]


@pytest.mark.parametrize("case", MALFORMED_BODIES, ids=lambda c: repr(c[1][:24]))
def test_malformed_bodies_are_4xx(server: Server, case: tuple[tuple[str, ...], bytes]) -> None:
    actions, raw = case
    for action in actions:
        run = server.site.gated if action.startswith("gates") else server.site.hero
        headers = {"X-Runner-Token": TOKEN, "Content-Type": "application/json"}
        status, _, body = server.request("POST", f"/api/runs/{run}/{action}", raw, headers)
        assert 400 <= status < 500, (action, status, body[:300])
        _no_secrets(server, body)


MALFORMED_REQUESTS: list[tuple[str, dict[str, str]]] = [
    ("/api/runs/{hero}/events", {"Last-Event-ID": "9" * 100_000}),
    ("/api/runs/{hero}/events", {"Last-Event-ID": "\u00b2".encode().decode("latin-1")}),
    ("/api/runs/{hero}/events", {"Last-Event-ID": "-1"}),
    ("/api/runs/{hero}/events?after=" + "9" * 5000, {}),
    ("/api/runs/{hero}/events?after=%ED%A0%80", {}),
    ("/api/runs/%ED%A0%80", {}),
    ("/api/runs/%00", {}),
    ("/runs/%ED%A0%80%FF", {}),
    ("/api/runs?limit=1e9", {}),
    ("/api/objects/..%2F..%2Fjournal.db", {}),
    ("/static/..%2F..%2Fsecurity.py", {}),
]


@pytest.mark.parametrize("case", MALFORMED_REQUESTS, ids=lambda c: c[0][:40])
def test_malformed_requests_are_answered_without_500(
    server: Server, case: tuple[str, dict[str, str]]
) -> None:
    path, extra = case
    headers = {"X-Runner-Token": TOKEN, **extra}
    status, _, body = server.request("GET", path.format(hero=server.site.hero), headers=headers)
    assert status < 500, (path, status, body[:300])
    _no_secrets(server, body)


def test_body_over_the_limit_refused_from_content_length(server: Server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", f"/api/runs/{server.site.hero}/pick")
    conn.putheader("X-Runner-Token", TOKEN)
    conn.putheader("Content-Length", str(10**12))
    conn.endheaders()  # no body is sent: the answer must come from the header alone
    res = conn.getresponse()
    assert res.status == 413
    conn.close()
    for bad in ("abc", "1" * 40, "-5"):
        status, _, _ = server.request(
            "POST",
            f"/api/runs/{server.site.hero}/pick",
            None,
            {"X-Runner-Token": TOKEN, "Content-Length": bad},
        )
        assert 400 <= status < 500


def test_chunked_body_over_the_limit_refused_while_read(server: Server) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"which": "'
        for _ in range(3):  # 3 MiB > the 1 MiB limit
            yield b"x" * (1 << 20)
        yield b'"}'

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(
            "POST",
            f"/api/runs/{server.site.hero}/pick",
            body=chunks(),
            headers={"X-Runner-Token": TOKEN, "Transfer-Encoding": "chunked"},
            encode_chunked=True,
        )
        res = conn.getresponse()
        status = res.status
    except (BrokenPipeError, ConnectionResetError):
        status = 413  # the server answered and closed before all of it was sent
    finally:
        conn.close()
    assert status == 413


def test_server_error_pages_show_no_paths(server: Server) -> None:
    status, _, body = server.request("GET", "/runs/nosuchrun", headers={"Cookie": server.cookie()})
    assert status == 404
    _no_secrets(server, body)
    assert re.search(rb"/(tmp|home|root)/", body) is None
