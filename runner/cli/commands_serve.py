"""`runner serve`: the local web page for runs (live progress, picking, gates)."""

from __future__ import annotations

import os

import click

from ..errors import UsageError
from .app import cli, state_option
from .commands_core import _open_state


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
@state_option
def serve(
    host: str, port: int, open_browser: bool, token: str | None, state_dir: str | None
) -> None:
    """Serve a local web page for runs: live progress, iteration picking, gate decisions.

    Example: runner serve --state .runner --open
    """
    import uvicorn

    from ..web.app import create_app
    from ..web.security import is_loopback, new_token

    if not is_loopback(host) and not token:
        raise UsageError(
            f"binding {host} exposes the runs beyond this machine; pass --token "
            "or set RUNNER_SERVE_TOKEN"
        )
    state = _open_state(state_dir)  # the same lookup (and NotFound) as `runner runs list`
    path = state.dir
    state.close()
    token = token or new_token()
    app = create_app(path, token, bind_host=host)
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"
    if not is_loopback(host):
        click.echo(
            f"warning: serving on {host}: anyone who can reach it can read the runs; "
            "changes need the token",
            err=True,
        )
    click.echo(f"runner serve: {url}  (state {path}; Ctrl-C stops)", err=True)
    click.echo(f"session token (X-Runner-Token for API changes): {token}", err=True)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    log_level = os.environ.get("RUNNER_SERVE_LOG", "warning")
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
