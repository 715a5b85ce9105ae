"""The Starlette application behind `runner serve`: pages, JSON API, static files, guards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ...errors import NotFound, RunnerError, UsageError
from . import api, pages
from .adapters import Jobs
from .masking import MaskMiddleware
from .responses import error_response
from .security import Guard, GuardMiddleware, is_api
from .service import Conflict

STATIC = Path(__file__).parent / "static"
JOB_GRACE_S = 30.0


def _wants_html(request_path: str) -> bool:
    return not is_api(request_path)


async def _runner_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunnerError)
    return error_response(exc, as_html=_wants_html(request.url.path))


async def _conflict(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Conflict)
    return error_response(exc.error, 409, as_html=_wants_html(request.url.path))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: RunnerError
    if exc.status_code == 404:
        error = NotFound(f"no such page: {request.url.path}", hint="see /api/openapi.json")
    else:
        error = UsageError(f"{request.method} {request.url.path}: {exc.detail}")
    return error_response(error, exc.status_code, as_html=_wants_html(request.url.path))


def create_app(
    state_dir: Path,
    token: str,
    *,
    bind_host: str = "127.0.0.1",
    extra_hosts: Iterable[str] = (),
    cwd: Path | None = None,
    export_dirs: Iterable[Path] = (),
) -> Starlette:
    """The web app over ``state_dir``; every request but static files needs ``token`` (or the
    cookie the login URL gives). ``extra_hosts`` are more Host names to answer to (tests use
    "testserver"). Export folders are relative to ``cwd`` and must lie inside the project (the
    directory holding the state) or one of ``export_dirs``."""
    jobs = Jobs()

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        jobs.join_all(JOB_GRACE_S)  # a child run started from the page finishes recording

    app = Starlette(
        routes=[
            *api.ROUTES,
            *pages.ROUTES,
            Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
        ],
        exception_handlers={
            RunnerError: _runner_error,
            Conflict: _conflict,
            HTTPException: _http_error,
        },
        lifespan=lifespan,
    )
    guard = Guard.for_bind(token, bind_host, extra_hosts)
    app.state.runner = api.Settings(
        state_dir=Path(state_dir).resolve(),
        guard=guard,
        jobs=jobs,
        cwd=(cwd or Path.cwd()).resolve(),
        export_roots=(
            Path(state_dir).resolve().parent,
            *(Path(d).resolve() for d in export_dirs),
        ),
    )
    app.add_middleware(MaskMiddleware)  # inside the guard: what an answer shows is masked
    app.add_middleware(GuardMiddleware, guard=guard)
    return app
