"""`runner server status|stop`: the warm servers `runner apply` forks from (runner/warm)."""

from __future__ import annotations

import time

from .base import cli, emit_json, json_option
from .termtext import echo


@cli.group()
def server() -> None:
    """The warm servers: processes that have imported runner once, so that each `runner apply`
    forks from one instead of starting an interpreter and importing it again (one per Python
    set-up; each ends after RUNNER_SERVER_IDLE seconds without an apply, 900 by default;
    RUNNER_SERVER=0 turns them off).

    Example: runner server status --json
    """


@server.command("status")
@json_option
def server_status(as_json: bool) -> None:
    """The servers running for this user: process, applies served, CPU.

    Example: runner server status
    """
    from ...warm import control

    found = control.statuses()
    if as_json:
        emit_json({"servers": found, "exit_code": 0})
        return
    if not found:
        echo("no warm server is running")
        return
    for s in found:
        age = time.time() - s["started"]
        echo(
            f"pid {s['pid']}: {s['served']} applies served, {s['running']} running, "
            f"up {age:.0f}s, CPU {s['cpu_seconds']:.2f}s "
            f"(its applies {s['children_cpu_seconds']:.2f}s), {s['executable']}"
        )


@server.command("stop")
@json_option
def server_stop(as_json: bool) -> None:
    """Stop every server of this user: it takes no new apply and leaves once those it runs end.

    Example: runner server stop
    """
    from ...warm import control

    stopped = control.stop_all()
    if as_json:
        emit_json({"stopped": stopped, "exit_code": 0})
        return
    echo(f"stopped {len(stopped)} warm server{'s' if len(stopped) != 1 else ''}")
