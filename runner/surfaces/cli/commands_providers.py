"""`runner providers`: installed model providers, and the project's with each backend's health."""

from __future__ import annotations

from pathlib import Path

import click

from .base import cli, emit_json, json_option
from .termtext import echo, echo_block, safe


@cli.command()
@click.option("--no-probe", is_flag=True, help="Do not contact the configured backends.")
@json_option
def providers(no_probe: bool, as_json: bool) -> None:
    """List installed providers (built-in and plugins) with their capabilities, then the
    providers configured in the nearest runner.toml with each backend's health (probed now:
    up, down when it refuses connections, unreachable when it does not answer) and the load it
    reports.

    Example: runner providers --json
    """
    from ...providers.health import report

    doc = report(Path.cwd(), probe=not no_probe)
    if as_json:
        emit_json(doc)
        return
    for i in doc["providers"]:
        c = i["capabilities"]
        trial = set(c.get("experimental", ()))
        kinds = ",".join(f"{k} (experimental)" if k in trial else k for k in c["kinds"])
        echo(
            f"{i['name']:<10} v{i['version']:<4} kinds={kinds} "
            f"seed={c['supports_seed']} "
            f"reference={c['supports_reference_image']} max_concurrency={c['max_concurrency']}"
        )
    echo()
    echo("configured:")
    for p in doc["configured"]:
        if "error" in p:
            # the message names the file and may carry a hint on its own line
            echo_block(f"  {safe(p['name']):<10} error: {safe(p['error'], lines=True)}")
            continue
        mark = " (default)" if p["default"] else ""
        echo(
            f"  {p['name']}{mark}: {p['type']} {p['profile']} "
            f"max_concurrency={p['max_concurrency']}"
        )
        for b in p["backends"]:
            health = b.get("health", "not probed")
            extra = f" {b['latency_ms']} ms" if "latency_ms" in b else ""
            extra += f" load={b['load']}" if "load" in b else ""
            extra += f" ({b['error']})" if "error" in b else ""
            echo(
                f"    {b['url']}  {health}{extra}  max_concurrency={b['max_concurrency']} "
                f"weight={b['weight']:g}"
            )
