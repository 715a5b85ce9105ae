"""`runner serve`: the local web page for runs (live progress, picking, gates)."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Any

import click

from ...errors import UsageError
from .base import cli, state_option
from .openstate import open_state
from .termtext import echo


@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback needs --token.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.option(
    "--token",
    default=None,
    envvar="RUNNER_SERVE_TOKEN",
    help="Session token for changes (default: a fresh random one).",
)
@click.option(
    "--export-dir",
    "export_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A folder outside the project the page may export to (repeatable).",
)
@state_option
def serve(
    host: str,
    port: int,
    open_browser: bool,
    token: str | None,
    export_dirs: tuple[str, ...],
    state_dir: str | None,
) -> None:
    """Serve a local web page for runs: live progress, iteration picking, gate decisions.

    Every request needs the session token: open the printed URL once (it carries the token and
    leaves an HttpOnly cookie in the browser); API clients send it as X-Runner-Token. Exports
    from the page go inside the project or an --export-dir.

    Example: runner serve --state .runner --open
    """
    import uvicorn

    from ..web.app import create_app
    from ..web.security import is_loopback, login_url, new_token

    if not is_loopback(host) and not token:
        raise UsageError(
            f"binding {host} exposes the runs beyond this machine; pass --token "
            "or set RUNNER_SERVE_TOKEN"
        )
    state = open_state(state_dir)  # the same lookup (and NotFound) as `runner runs list`
    path = state.dir
    state.close()
    token = token or new_token()
    from ...source import secretmask

    secretmask.shown_on_purpose(token)  # the login URL must carry it (RUNNER_SERVE_TOKEN)
    app = create_app(path, token, bind_host=host, export_dirs=[Path(d) for d in export_dirs])
    sock = _listen(host, port)  # before any URL is printed: a busy port is said plainly
    port = sock.getsockname()[1]  # --port 0: the one the system chose
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"
    if not is_loopback(host):
        echo(
            f"warning: serving on {host} over plain HTTP: the token and cookie cross the "
            "network unencrypted",
            err=True,
        )
    from ...source.termtext import shown_path

    echo(
        f"runner serve: {login_url(url, token)}  (state {shown_path(path)}; Ctrl-C stops)",
        err=True,
    )
    echo("open that URL once; API clients send the token as X-Runner-Token", err=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(0.5, webbrowser.open, args=(login_url(url, token),)).start()
    log_level = os.environ.get("RUNNER_SERVE_LOG", "warning")
    config = uvicorn.Config(app, log_level=log_level, access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a UsageError naming a free port to try instead."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not past a live listener
    try:
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            free = _free_port(family, addr, port)
            hint = f"; try --port {free}" if free else ""
            raise UsageError(f"port {port} is in use{hint}") from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _free_port(family: int, addr: tuple[Any, ...], busy: int) -> int | None:
    for candidate in range(busy + 1, min(busy + 50, 65536)):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((addr[0], candidate, *addr[2:]))
            except OSError:
                continue
            return candidate
    return None
