"""What `runner providers` reports: installed providers, and the project's configured ones with
each backend's health and load as probed now.

A probe is one GET per backend, all at once, bounded by ``PROBE_TIMEOUT``: a refused connection
is ``down``, no answer in time is ``unreachable``, a server whose TLS or certificate does not
verify is ``tls_failure`` (it is there; no wait mends it), any HTTP answer is ``up`` (an auth
error still proves the server is there). Where the protocol reports load (a provider's
``probe_path`` and ``load_of``), it is shown as the backend says it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ..state.canonical import loads_strict
from .base import Provider, ProviderConfigError
from .config import Providers
from .registry import list_providers

PROBE_TIMEOUT = 2.0


def installed() -> list[dict[str, Any]]:
    """Every installed provider with its version and capabilities."""
    return [
        {"name": i.name, "version": i.version, "capabilities": i.capabilities.to_json()}
        for i in list_providers()
    ]


async def _probe(provider: Any, url: str) -> dict[str, Any]:
    from ._http import tls_context, tls_failure
    from ._httpx import httpx

    began = time.perf_counter()
    try:
        async with httpx.AsyncClient(
            timeout=PROBE_TIMEOUT, trust_env=False, verify=tls_context(), headers=provider.headers()
        ) as client:
            resp = await client.get(f"{url}/{provider.probe_path}")
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        tls = tls_failure(exc)
        if tls is not None:
            return {"health": "tls_failure", "error": provider.redact(f"TLS/certificate: {tls}")}
        return {"health": "down", "error": provider.redact(f"{type(exc).__name__}: {exc}")}
    except httpx.HTTPError as exc:
        return {"health": "unreachable", "error": provider.redact(f"{type(exc).__name__}: {exc}")}
    out: dict[str, Any] = {
        "health": "up",
        "status": resp.status_code,
        "latency_ms": round((time.perf_counter() - began) * 1000, 1),
    }
    if resp.status_code < 400:
        try:
            load = provider.load_of(loads_strict(resp.content))
        except ValueError:
            load = None
        if load is not None:
            out["load"] = load
    return out


async def _backends(provider: Provider, probe: bool) -> list[dict[str, Any]]:
    pool = getattr(provider, "pool", None)
    if pool is None:
        return []
    rows = [
        {"url": b.url, "max_concurrency": b.max_concurrency, "weight": b.weight}
        for b in pool.backends
    ]
    if probe:
        found = await asyncio.gather(*(_probe(provider, row["url"]) for row in rows))
        for row, seen in zip(rows, found, strict=True):
            row.update(seen)
    return rows


def configured(start: Path, *, probe: bool = True) -> list[dict[str, Any]]:
    """The providers of the nearest runner.toml (or the default), each backend probed.

    A provider whose settings are invalid is listed with its error instead.
    """
    access = Providers.for_dir(start)
    names = [access.default_name(), *access.config.providers]

    async def gather() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name in dict.fromkeys(names):
            try:
                provider = access.get(name)
                row: dict[str, Any] = {
                    "name": name,
                    "type": provider.key,
                    "profile": provider.profile(),
                    "max_concurrency": provider.capabilities.max_concurrency,
                    "default": name == access.default_name(),
                }
            except ProviderConfigError as exc:
                out.append({"name": name, "error": str(exc)})
                continue
            row["backends"] = await _backends(provider, probe)
            out.append(row)
        return out

    return asyncio.run(gather())


def report(start: Path, *, probe: bool = True) -> dict[str, Any]:
    """The document of `runner providers --json`."""
    return {"providers": installed(), "configured": configured(start, probe=probe), "exit_code": 0}
