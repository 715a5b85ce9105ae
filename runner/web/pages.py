"""Server-rendered pages (Jinja2, autoescaped); the small scripts in static/ call the JSON API."""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from . import api, service

TEMPLATES = Path(__file__).parent / "templates"


def _when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _yaml(value: Any) -> str:
    from ..gateview import as_yaml

    return as_yaml(value)


def _tab(request: Request) -> str:
    """Which top tab the page belongs to: the highlighted one follows the page."""
    path = request.url.path
    if path == "/" and request.query_params.get("awaiting", "") in ("1", "true", "on", "yes"):
        return "awaiting"
    if path == "/" or path.startswith("/runs/"):
        return "runs"
    return path.strip("/").split("/")[0]


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, seconds=_seconds, pretty=_pretty, yaml=_yaml)
    return env


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    cfg = api.settings(request)
    html = (
        environment()
        .get_template(name)
        .render(state_dir=str(cfg.state_dir), path=request.url.path, tab=_tab(request), **context)
    )
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


async def runs_page(request: Request) -> Response:
    filters = {k: request.query_params.get(k, "") for k in ("pipeline", "item", "status")}
    awaiting = request.query_params.get("awaiting", "") in ("1", "true", "on", "yes")
    doc = await api.in_state(
        request,
        lambda s: service.list_runs(
            s,
            pipeline=filters["pipeline"] or None,
            status=filters["status"] or None,
            item=filters["item"] or None,
            awaiting=awaiting,
            limit=200,
        ),
    )
    query = urlencode(
        {**{k: v for k, v in filters.items() if v}, **({"awaiting": "1"} if awaiting else {})}
    )
    return render(
        request, "runs.html", runs=doc["runs"], filters=filters, awaiting=awaiting, query=query
    )


async def run_page(request: Request) -> Response:
    doc = await api.in_state(request, service.run_document, request.path_params["run_id"])
    pending = [d for d in doc["decisions"] if d["status"] == "pending"]
    return render(
        request, "run.html", doc=doc, run=doc["run"], pending=pending, iterations=doc["iterations"]
    )


async def steps_page(request: Request) -> Response:
    doc = await run_in_threadpool(service.step_types)
    return render(request, "steps.html", steps=doc["steps"])


async def providers_page(request: Request) -> Response:
    doc = await run_in_threadpool(service.providers)
    return render(request, "providers.html", providers=doc["providers"])


ROUTES = [
    Route("/", runs_page),
    Route("/runs/{run_id}", run_page),
    Route("/steps", steps_page),
    Route("/providers", providers_page),
]
