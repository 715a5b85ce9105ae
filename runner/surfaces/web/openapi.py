"""The OpenAPI 3 document of the JSON API (served at /api/openapi.json)."""

from __future__ import annotations

from typing import Any

from ... import __version__

JSON = "application/json"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema or {"type": "object"}}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "Bad request (the CLI's exit 2: usage error, invalid pipeline)",
        403: "Missing or wrong session token, foreign Origin or unknown Host",
        404: "Unknown run, iteration or gate (the CLI's exit 3)",
        409: "The run is not in a state that allows this (busy, not waiting, decided)",
    }
    return {
        str(c): {"description": text[c], "content": {JSON: {"schema": _ref("Error")}}}
        for c in codes
    }


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {"required": True, "content": {JSON: {"schema": schema}}}


def _post(
    summary: str, body: dict[str, Any], *params: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": [*params, _token()],
            "requestBody": body,
            "responses": {
                "200": _ok("Done; the document `runner ... --json` prints"),
                **(extra or {}),
                **_errors(400, 403, 404, 409),
            },
        }
    }


def _token() -> dict[str, Any]:
    return {
        "name": "X-Runner-Token",
        "in": "header",
        "required": True,
        "description": "The session token printed by `runner serve`.",
        "schema": {"type": "string"},
    }


RUN_ID = _path("run_id", "A run id or a unique prefix of one (at least 4 characters).")
ITERATION = {"type": ["string", "integer"], "description": "An ordinal or an iteration id."}


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 description of every /api endpoint the pages use."""
    paths: dict[str, Any] = {
        "/api/runs": {
            "get": {
                "summary": "List runs, newest first (`runner runs list --json`).",
                "parameters": [
                    _query("pipeline", {"type": "string"}, "Only this pipeline."),
                    _query("item", {"type": "string"}, "Only this item."),
                    _query("status", {"type": "string"}, "Only this status."),
                    _query("awaiting", {"type": "boolean"}, "Only runs waiting for a decision."),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 1000},
                        "At most this many (default 50).",
                    ),
                ],
                "responses": {
                    "200": _ok(
                        "The runs",
                        {
                            "type": "object",
                            "properties": {"runs": {"type": "array", "items": _ref("RunSummary")}},
                        },
                    ),
                    **_errors(400),
                },
            }
        },
        "/api/runs/{run_id}": {
            "get": {
                "summary": "One run (`runner runs show --json`) with its steps grouped by phase "
                "and its gate decisions.",
                "parameters": [RUN_ID],
                "responses": {"200": _ok("The run", _ref("Run")), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/steps/{step}/output": {
            "get": {
                "summary": "One step's stored output in the run (null for a for_each step).",
                "parameters": [RUN_ID, _path("step", "The step id.")],
                "responses": {"200": _ok("The output"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/steps/{step}/elements": {
            "get": {
                "summary": "A step element by element: input item, arguments (an llm step's "
                "rendered prompt), output, check verdicts by attempt, attempts, errors; a card "
                "step adds its hash, prompt block and drift since the previous run.",
                "parameters": [
                    RUN_ID,
                    _path("step", "The step id."),
                    _query("offset", {"type": "integer", "minimum": 0}, "First element."),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "How many."),
                ],
                "responses": {"200": _ok("The elements"), **_errors(400, 404)},
            }
        },
        "/api/runs/{run_id}/graph": {
            "get": {
                "summary": "The run's DAG (phases, steps, edges: what `runner graph` draws) "
                "with each step's status.",
                "parameters": [RUN_ID],
                "responses": {"200": _ok("The graph"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/tiles": {
            "get": {
                "summary": "A run's images as their provider calls complete (before the run "
                "records iterations), with a count.",
                "parameters": [RUN_ID],
                "responses": {"200": _ok("The tiles"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/events": {
            "get": {
                "summary": "The run's journaled events after `after`; with `Accept: "
                "text/event-stream` (or stream=true) a live server-sent event stream "
                "that ends with an `end` event once the run has finished.",
                "parameters": [
                    RUN_ID,
                    _query(
                        "after", {"type": "integer", "minimum": 0}, "Only events with a larger seq."
                    ),
                    _query("stream", {"type": "boolean"}, "Stream as server-sent events."),
                ],
                "responses": {
                    "200": {
                        "description": "The events",
                        "content": {
                            JSON: {"schema": {"type": "object"}},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(400, 404),
                },
            }
        },
        "/api/runs/{run_id}/pick": _post(
            "Pick one iteration (`runner pick RUN WHICH`); picking again moves the pick.",
            _body({"which": ITERATION}, ["which"]),
            RUN_ID,
        ),
        "/api/runs/{run_id}/export": _post(
            "Copy the run's finals (or one iteration's) to a folder (`runner export`).",
            _body(
                {
                    "to": {
                        "type": "string",
                        "description": "Folder; relative to the server's working directory.",
                    },
                    "raw": {"type": "boolean"},
                    "iteration": ITERATION,
                    "picked": {"type": "boolean", "description": "Only the picked iteration."},
                    "overwrite": {
                        "type": "boolean",
                        "description": "Replace files of the same name with other content "
                        "(refused otherwise: an earlier export of another run).",
                    },
                },
                ["to"],
            ),
            RUN_ID,
        ),
        "/api/runs/{run_id}/iterate": _post(
            "Start a child run refining an iteration (`runner iterate`).",
            _body(
                {
                    "iteration": ITERATION,
                    "n": {"type": "integer", "minimum": 1, "maximum": 32},
                    "prompt_append": {"type": "string"},
                    "vars": {"type": "object"},
                    "from_picked": {"type": "boolean"},
                    "wait": {"type": "boolean", "description": "Answer once the child finished."},
                },
                [],
            ),
            RUN_ID,
            extra={"202": _ok("The child run started; follow its events")},
        ),
        "/api/runs/{run_id}/gates/{gate}/decide": _post(
            "Decide a pending human gate (`runner decide`); the run then continues in the server "
            "(`runner resume RUN`) unless `resume` is false.",
            _body(
                {
                    "decision": {"type": "string", "enum": ["approve", "reject", "revise"]},
                    "input": {"type": "object"},
                    "comment": {"type": "string"},
                    "by": {"type": "string"},
                    "resume": {"type": "boolean", "description": "Continue the run (default)."},
                },
                ["decision"],
            ),
            RUN_ID,
            _path("gate", "The gate's step id."),
        ),
        "/api/steps": {
            "get": {
                "summary": "Installed step types (`runner steps --json`).",
                "responses": {"200": _ok("The step types")},
            }
        },
        "/api/providers": {
            "get": {
                "summary": "Installed providers (`runner providers --json`).",
                "responses": {"200": _ok("The providers")},
            }
        },
        "/api/objects/{digest}": {
            "get": {
                "summary": "An iteration image from the object store, by its sha256.",
                "parameters": [_path("digest", "64 lowercase hex digits.")],
                "responses": {
                    "200": {
                        "description": "The image",
                        "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    **_errors(404),
                },
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runner serve",
            "version": __version__,
            "description": "The JSON API behind `runner serve`'s pages. State-changing "
            "requests need the X-Runner-Token header and a same-site "
            "Origin.",
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "exit_code"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["type", "message"],
                            "properties": {
                                "type": {"type": "string"},
                                "message": {"type": "string"},
                                "hint": {"type": ["string", "null"]},
                            },
                        },
                        "exit_code": {"type": "integer"},
                    },
                },
                "RunSummary": {
                    "type": "object",
                    "properties": {
                        k: {"type": ["string", "number", "null"]}
                        for k in (
                            "id",
                            "pipeline",
                            "item",
                            "status",
                            "kind",
                            "created_at",
                            "exit_code",
                            "reason",
                            "repeat_of",  # the run an unchanged re-apply repeats
                        )
                    },
                },
                "Run": {
                    "type": "object",
                    "required": ["run", "executions", "iterations", "phases"],
                    "properties": {
                        "run": {"type": "object"},
                        "executions": {"type": "array"},
                        "iterations": {"type": "array"},
                        "phases": {"type": "array"},
                        "decisions": {"type": "array"},
                        "last_event": {"type": "integer"},
                    },
                },
            }
        },
    }
