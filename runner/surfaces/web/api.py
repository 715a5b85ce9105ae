"""The JSON API under /api/: each endpoint parses, calls one service function, returns JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...errors import NotFound, UsageError
from ...state.canonical import loads_strict
from . import adapters, service
from .openapi import openapi_document
from .security import Guard
from .sse import event_stream

MAX_BODY = 1 << 20


@dataclass
class Settings:
    """What every request needs, kept on ``app.state.runner``."""

    state_dir: Path
    guard: Guard
    jobs: adapters.Jobs
    cwd: Path
    export_roots: tuple[Path, ...] = ()


def settings(request: Request) -> Settings:
    value: Settings = request.app.state.runner
    return value


async def in_state(
    request: Request, fn: Callable[..., Any], *args: Any, readonly: bool = True
) -> Any:
    """Run ``fn(state, *args)`` in a worker thread with the state directory opened."""
    cfg = settings(request)

    def call() -> Any:
        with service.opened(cfg.state_dir, readonly=readonly) as state:
            return fn(state, *args)

    return await run_in_threadpool(call)


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "").lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise UsageError(f"query parameter '{name}' must be true or false")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"query parameter '{name}' must be an integer") from None
    if not low <= value <= high:
        raise UsageError(f"query parameter '{name}' must be from {low} to {high}")
    return value


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value or None


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise UsageError("request body is too large")
    if not raw.strip():
        return {}
    try:  # strict: no NaN/Infinity (the journal refuses them: a 500), no lone surrogate
        # ("\ud800" parses but can be neither stored nor used as a path), bounded nesting
        value = loads_strict(raw)
    except ValueError as exc:
        raise UsageError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError("request body must be a JSON object")
    return value


async def list_runs(request: Request) -> Response:
    doc = await in_state(
        request,
        lambda s: service.list_runs(
            s,
            pipeline=_text(request, "pipeline"),
            status=_text(request, "status"),
            item=_text(request, "item"),
            awaiting=_flag(request, "awaiting"),
            limit=_int(request, "limit", 50, 1, 1000),
        ),
    )
    return JSONResponse(doc)


async def show_run(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    return JSONResponse(await in_state(request, service.run_document, run_id))


async def run_events(request: Request) -> Response:
    after = _int(request, "after", 0, 0, 2**62)
    last_id = request.headers.get("last-event-id", "")
    # Only what this server sends as ids (ASCII digits that fit the journal); anything else,
    # as EventSource does with an unknown id, is ignored rather than a 500.
    if last_id.isascii() and last_id.isdigit() and len(last_id) <= 18:
        after = max(after, int(last_id))
    run_id = request.path_params["run_id"]
    accept = request.headers.get("accept", "")
    wants_stream = _flag(request, "stream") or "text/event-stream" in accept
    if not wants_stream:
        return JSONResponse(await in_state(request, service.events, run_id, after))
    exact = await in_state(request, lambda s: s.journal.get_run(run_id)["id"])
    cfg = settings(request)
    return StreamingResponse(
        event_stream(cfg.state_dir, exact, after, cfg.jobs),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def step_output(request: Request) -> Response:
    params = request.path_params
    doc = await in_state(request, service.step_output, params["run_id"], params["step"])
    return JSONResponse(doc)


async def step_elements(request: Request) -> Response:
    from .elements import MAX_ELEMENTS
    from .elements import step_elements as elements_of

    params = request.path_params
    offset = _int(request, "offset", 0, 0, 2**31)
    limit = _int(request, "limit", MAX_ELEMENTS, 1, MAX_ELEMENTS)
    query = request.query_params.get("q", "")[:200]
    doc = await in_state(
        request,
        lambda s: elements_of(
            s, params["run_id"], params["step"], offset=offset, limit=limit, query=query
        ),
    )
    return JSONResponse(doc)


async def live_tiles(request: Request) -> Response:
    return JSONResponse(await in_state(request, service.live_tiles, request.path_params["run_id"]))


async def run_graph(request: Request) -> Response:
    return JSONResponse(await in_state(request, service.run_graph, request.path_params["run_id"]))


async def steps(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(service.step_types))


async def providers(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(service.providers))


async def image(request: Request) -> Response:
    digest = request.path_params["digest"]
    path = await in_state(request, service.image_object, digest)
    if path is None:
        raise NotFound(f"no image '{digest[:64]}' in the store")
    from ...review.thumbs.hooks import sniff_ext

    ext = sniff_ext(path)
    media = {"jpg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}
    return FileResponse(
        path,
        media_type=media.get(ext, "application/octet-stream"),
        headers={"Cache-Control": "private, max-age=31536000, immutable"},
    )


async def pick(request: Request) -> Response:
    body = await _body(request)
    doc = await in_state(request, service.pick, request.path_params["run_id"], body)
    return JSONResponse(doc)


async def export(request: Request) -> Response:
    body = await _body(request)
    cfg = settings(request)
    doc = await in_state(
        request,
        lambda s: adapters.export(
            s, request.path_params["run_id"], body, cwd=cfg.cwd, roots=cfg.export_roots
        ),
    )
    return JSONResponse(doc)


async def iterate(request: Request) -> Response:
    body = await _body(request)
    cfg = settings(request)
    doc = await in_state(
        request,
        lambda s: adapters.iterate(cfg.state_dir, s, request.path_params["run_id"], body, cfg.jobs),
    )
    return JSONResponse(doc, status_code=202 if doc.get("status") == "running" else 200)


async def decide(request: Request) -> Response:
    body = await _body(request)
    doc = await in_state(
        request,
        service.decide,
        request.path_params["run_id"],
        request.path_params["gate"],
        body,
        readonly=False,
    )
    doc["resumed"] = False
    if body.get("resume", True) is not False:
        # The reviewer watches the run go on: it continues here, as `runner resume` would.
        cfg = settings(request)
        doc["resumed"] = adapters.resume_in_background(cfg.state_dir, doc["run_id"], cfg.jobs)
    return JSONResponse(doc)


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


ROUTES = [
    Route("/api/openapi.json", openapi),
    Route("/api/runs", list_runs),
    Route("/api/runs/{run_id}", show_run),
    Route("/api/runs/{run_id}/events", run_events),
    Route("/api/runs/{run_id}/steps/{step}/output", step_output),
    Route("/api/runs/{run_id}/steps/{step}/elements", step_elements),
    Route("/api/runs/{run_id}/graph", run_graph),
    Route("/api/runs/{run_id}/tiles", live_tiles),
    Route("/api/runs/{run_id}/pick", pick, methods=["POST"]),
    Route("/api/runs/{run_id}/export", export, methods=["POST"]),
    Route("/api/runs/{run_id}/iterate", iterate, methods=["POST"]),
    Route("/api/runs/{run_id}/gates/{gate}/decide", decide, methods=["POST"]),
    Route("/api/steps", steps),
    Route("/api/providers", providers),
    Route("/api/objects/{digest}", image),
]
