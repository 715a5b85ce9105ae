"""Library errors as HTTP responses, in one place: the CLI's message and exit code, as JSON."""

from __future__ import annotations

import html

from starlette.responses import HTMLResponse, JSONResponse, Response

from ...errors import Busy, InvalidPipeline, NotFound, RunnerError, UsageError


class Forbidden(RunnerError):
    """A request from a foreign Origin, for an unknown Host, or with wrong credentials."""

    exit_code = 2


class Unauthorized(Forbidden):
    """A request without credentials (answered 401)."""


class UnsafeInput(UsageError):
    """Input the server refuses to act on (answered 400)."""


class BodyTooLarge(RunnerError):
    """A request body over the limit (answered 413 before the rest is read)."""

    exit_code = 2

# Most specific first: Busy is not a UsageError, but Conflict-like.
STATUS: list[tuple[type[RunnerError], int]] = [
    (Unauthorized, 401),
    (Forbidden, 403),
    (BodyTooLarge, 413),
    (NotFound, 404),
    (Busy, 409),
    (UsageError, 400),
    (InvalidPipeline, 400),
]


def status_for(exc: RunnerError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def error_body(exc: RunnerError) -> dict[str, object]:
    """What `runner ... --json` prints for this error."""
    return {"error": exc.to_json(), "exit_code": exc.exit_code}


def error_response(
    exc: RunnerError, status: int | None = None, *, as_html: bool = False
) -> Response:
    code = status or status_for(exc)
    if as_html:
        hint = f"<p class='hint'>hint: {html.escape(exc.hint)}</p>" if exc.hint else ""
        page = (
            f"<!doctype html><meta charset='utf-8'><title>{code} - runner</title>"
            f"<link rel='stylesheet' href='/static/app.css'>"
            f"<main><h1>{code}</h1><p class='error'>error: {html.escape(exc.message)}</p>"
            f"{hint}<p><a href='/'>all runs</a></p></main>"
        )
        return HTMLResponse(page, status_code=code)
    return JSONResponse(error_body(exc), status_code=code)
