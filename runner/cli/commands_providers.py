"""`runner providers`: installed model providers and their capabilities."""

from __future__ import annotations

import click

from .app import cli, emit_json, json_option


@cli.command()
@json_option
def providers(as_json: bool) -> None:
    """List installed providers (built-in and plugins) with their capabilities.

    Example: runner providers --json
    """
    from ..providers.registry import list_providers

    infos = list_providers()
    if as_json:
        emit_json(
            {
                "providers": [
                    {"name": i.name, "version": i.version, "capabilities": i.capabilities.to_json()}
                    for i in infos
                ],
                "exit_code": 0,
            }
        )
        return
    for i in infos:
        c = i.capabilities
        click.echo(
            f"{i.name:<10} v{i.version:<4} kinds={','.join(sorted(c.kinds))} "
            f"seed={c.supports_seed} "
            f"reference={c.supports_reference_image} max_concurrency={c.max_concurrency}"
        )
