"""Structured output in the form each OpenAI-compatible server takes (openai.py).

The double answers as llama-cpp-python's server does (seen live, tests/live/test_llm_live.py):
``response_format: {type: json_schema}`` gets HTTP 500 with a pydantic validation error, and
``{type: json_object, schema}`` is obeyed. What GET /v1/models says of the server is a setting
of the double.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from runner.errors import ProviderError
from runner.providers import create
from runner.providers.base import TextRequest
from tests.providers.servers import ProtocolServer, Recorded, Reply

SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["a", "b"]}}}
REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


def llama_like(owner: str) -> ProtocolServer:
    server = ProtocolServer()

    def models(rec: Recorded) -> Reply:
        return Reply(200, {"object": "list", "data": [{"id": "tiny", "owned_by": owner}]})

    def chat(rec: Recorded) -> Reply:
        fmt = rec.json().get("response_format") or {}
        if fmt.get("type") not in (None, "text", "json_object"):
            body = {"error": {"message": REFUSAL, "type": "internal_server_error"}}
            return Reply(500, body)
        reply = {"choices": [{"message": {"content": '{"label": "a"}'}, "finish_reason": "stop"}]}
        return Reply(200, {"id": "c1", "model": "tiny", **reply})

    server.route("GET", "/v1/models", models)
    server.route("POST", "/v1/chat/completions", chat)
    return server


def ask(provider: Any) -> Any:
    request = TextRequest(messages=[{"role": "user", "content": "label it"}], json_schema=SCHEMA)
    return asyncio.run(provider.generate_text(request))


def forms(server: ProtocolServer) -> list[Any]:
    return [
        r.json().get("response_format")
        for r in server.requests
        if r.path == "/v1/chat/completions"
    ]


def test_a_server_that_says_it_is_llama_cpp_python_gets_json_object_with_schema() -> None:
    with llama_like("me") as server:
        p = create("openai", {"base_url": f"{server.url}/v1", "model": "tiny"})
        result = ask(p)
        ask(p)
        assert forms(server) == [{"type": "json_object", "schema": SCHEMA}] * 2
        assert server.count("GET", "/v1/models") == 1  # asked once per provider
    assert result.metadata["structured_output"] == "json_object_schema"


def test_a_refused_form_is_followed_by_the_next_one_at_once_and_remembered() -> None:
    with llama_like("someone") as server:
        p = create("openai", {"base_url": f"{server.url}/v1", "model": "tiny", "max_retries": 0})
        ask(p)
        ask(p)
        sent = forms(server)
    assert sent[0]["type"] == "json_schema"  # the server did not say what it is
    assert sent[1:] == [{"type": "json_object", "schema": SCHEMA}] * 2


def test_a_form_set_by_hand_is_sent_as_set_and_its_refusal_is_not_retried() -> None:
    with llama_like("me") as server:
        p = create(
            "openai",
            {"base_url": f"{server.url}/v1", "model": "tiny", "structured_output": "json_schema"},
        )
        with pytest.raises(ProviderError) as info:
            ask(p)
        assert len(forms(server)) == 1 and server.count("GET", "/v1/models") == 0
    assert not info.value.transient
    assert "Input should be 'text' or 'json_object'" in str(info.value)
    assert "names the request as invalid" in str(info.value)


def test_prompt_form_tells_the_schema_in_a_system_message() -> None:
    with llama_like("me") as server:
        p = create(
            "openai", {"base_url": f"{server.url}/v1", "model": "tiny", "structured_output": "prompt"}
        )
        ask(p)
        [body] = [r.json() for r in server.requests if r.path == "/v1/chat/completions"]
    assert "response_format" not in body
    assert body["messages"][0]["role"] == "system"
    assert json.dumps(SCHEMA, sort_keys=True) in body["messages"][0]["content"]


def test_openai_itself_is_never_asked_what_it_is() -> None:
    p = create("openai", {"model": "gpt-4o-mini"})
    assert asyncio.run(p._structured_form(None)) == "json_schema"  # type: ignore[attr-defined]


def test_an_unknown_form_is_a_setting_error() -> None:
    with pytest.raises(Exception, match="structured_output must be one of json_schema"):
        create("openai", {"structured_output": "xml"})


def test_the_form_is_not_part_of_the_profile() -> None:
    # How the schema travels, not what is asked: cached replies stay valid when it is set.
    assert (
        create("openai", {"structured_output": "json_object_schema"}).profile()
        == create("openai").profile()
    )
