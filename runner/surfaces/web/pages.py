"""Server-rendered pages (Jinja2, autoescaped); the small scripts in static/ call the JSON API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from . import api, runlist, service

TEMPLATES = Path(__file__).parent / "templates"


def _when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _bar(started: float | None, finished: float | None, span: Any) -> str:
    """A timeline bar's place as CSS (numbers only): where in the run's span a step began, and
    how long it took; "" when it has no time."""
    if not started or not isinstance(span, dict):
        return ""
    whole = span["end"] - span["start"]
    left = min(max((started - span["start"]) / whole, 0.0), 1.0)
    width = min(max(((finished or span["end"]) - started) / whole, 0.0), 1.0 - left)
    return f"left:{left * 100:.2f}%;width:max(2px,{width * 100:.2f}%)"


def _took(value: float | None) -> str:
    """A run's length as a person says it: 0.42s, 12.3s, 4m 05s, 1h 02m."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}s"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    return f"{minutes // 60}h {minutes % 60:02d}m"


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def _yaml(value: Any) -> str:
    from ...review.gateview import as_yaml

    return as_yaml(value)


def _vars(values: Any) -> str:
    from ...review.thumbs.iterate import flat_vars

    return flat_vars(values) if isinstance(values, dict) else ""


def _var_lines(params: Any) -> str:
    """A run's template vars as the iterate form takes them: KEY=VALUE lines when every value
    is one line of text, else one JSON object (the form reads both)."""
    if isinstance(params, str):
        try:
            params = json.loads(params or "{}")
        except ValueError:
            return ""
    values = params.get("vars") if isinstance(params, dict) else None
    if not isinstance(values, dict) or not values:
        return ""
    if all(isinstance(v, str) and "\n" not in v and not v.startswith("{") for v in values.values()):
        return "\n".join(f"{k}={v}" for k, v in values.items())
    return json.dumps(values, ensure_ascii=False)


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
    env.globals["bar"] = _bar
    env.filters["status_words"] = service.status_words
    env.filters.update(
        when=_when,
        seconds=_seconds,
        took=_took,
        pretty=_pretty,
        compact=_compact,
        yaml=_yaml,
        vars=_vars,
        var_lines=_var_lines,
    )
    return env


CHUNK = 64 * 1024


def _chunks(parts: Iterator[str]) -> Iterator[bytes]:
    # Jinja yields thousands of small strings; the socket gets them in 64 KiB pieces.
    buf: list[str] = []
    size = 0
    for part in parts:
        buf.append(part)
        size += len(part)
        if size >= CHUNK:
            yield "".join(buf).encode("utf-8")
            buf, size = [], 0
    if buf:
        yield "".join(buf).encode("utf-8")


def render(
    request: Request, name: str, status: int = 200, *, stream: bool = False, **context: Any
) -> Response:
    """The page ``name``; with ``stream`` it is sent as it renders (a long run's page starts
    arriving before its last row is laid out)."""
    cfg = api.settings(request)
    template = environment().get_template(name)
    # The header names the state by its project's folder (myproject/.runner), not by the whole
    # absolute path: the page is about the project, and its folder is what a person knows it by.
    state = cfg.state_dir
    values = {"state_dir": f"{state.parent.name}/{state.name}", "path": request.url.path}
    values["tab"] = _tab(request)
    headers = {"Cache-Control": "no-store"}
    if stream:
        return StreamingResponse(
            _chunks(template.generate(**values, **context)),
            status_code=status,
            media_type="text/html; charset=utf-8",
            headers=headers,
        )
    html = template.render(**values, **context)
    return HTMLResponse(html, status_code=status, headers=headers)


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
    groups = await api.in_state(request, lambda s: runlist.run_list_page(s, doc["runs"]))
    query = urlencode(
        {**{k: v for k, v in filters.items() if v}, **({"awaiting": "1"} if awaiting else {})}
    )
    return render(
        request,
        "runs.html",
        runs=doc["runs"],
        groups=groups,
        filters=filters,
        awaiting=awaiting,
        query=query,
    )


async def run_page(request: Request) -> Response:
    doc = await api.in_state(request, service.page_document, request.path_params["run_id"])
    pending = [d for d in doc["decisions"] if d["status"] == "pending"]
    return render(
        request,
        "run.html",
        stream=True,
        doc=doc,
        run=doc["run"],
        pending=pending,
        iterations=doc["iterations"],
    )


async def steps_page(request: Request) -> Response:
    doc = await run_in_threadpool(service.step_types)
    return render(request, "steps.html", steps=doc["steps"])


async def providers_page(request: Request) -> Response:
    doc = await run_in_threadpool(service.providers)
    return render(request, "providers.html", providers=doc["providers"])


async def collections_page(request: Request) -> Response:
    # the search form names its collection as a field (so it works without script)
    name = request.query_params.get("collection") or request.path_params.get("name")
    query = request.query_params.get("q", "")[:500]
    cfg = api.settings(request)
    doc = await run_in_threadpool(service.collections, cfg.state_dir, name, query, 100)
    return render(request, "collections.html", doc=doc)


ROUTES = [
    Route("/", runs_page),
    Route("/collections", collections_page),
    Route("/collections/{name}", collections_page),
    Route("/runs/{run_id}", run_page),
    Route("/steps", steps_page),
    Route("/providers", providers_page),
]
