"""The anthropic provider against a loopback server speaking Anthropic's Messages API."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.errors import Failure, ProviderError
from runner.providers import TextRequest, create
from runner.providers.anthropic import JSON_INSTRUCTION, AnthropicProvider
from runner.providers.base import ProviderConfigError, TextResult
from runner.providers.retry import call_with_retries
from runner.providers.tracking import CallTracker
from tests.conftest import runner_bin
from tests.providers.anthropic_server import OVERLOAD, REFUSE, AnthropicServer, error
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import Reply, png

KEY = "sk-ant-api03-0123456789abcdefghij"


def provider(server: AnthropicServer, **settings: object) -> AnthropicProvider:
    p = create(
        "anthropic",
        {"base_url": server.url + "/v1", "timeout": TIMEOUT * 10, **settings},
        {"api_key": KEY},
    )
    assert isinstance(p, AnthropicProvider)
    return p


def ask(p: AnthropicProvider, *messages: dict[str, Any], **kw: Any) -> TextResult:
    return asyncio.run(p.generate_text(TextRequest(messages=list(messages), **kw)))


def test_a_call_sends_the_documented_request_and_reads_text_and_usage() -> None:
    with AnthropicServer(api_key=KEY) as server:
        p = provider(server, model="claude-test")
        result = ask(
            p,
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "name a colour"},
            temperature=0.2,
            max_tokens=50,
        )
        [rec] = server.requests
    assert rec.path == "/v1/messages"
    assert rec.headers["x-api-key"] == KEY and "authorization" not in rec.headers
    assert rec.headers["anthropic-version"] == "2023-06-01"
    assert rec.json() == {
        "model": "claude-test",
        "max_tokens": 50,
        "temperature": 0.2,
        "system": [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": "name a colour"}],
    }
    assert result.text == "echo: name a colour"
    assert result.metadata["stop_reason"] == "end_turn"
    # The cache write is part of the prompt's tokens, said apart as well.
    assert result.usage == {
        "prompt_tokens": 6,
        "completion_tokens": 4,
        "cache_write_tokens": 3,
    }


def test_the_system_prefix_is_written_once_then_read_from_the_cache() -> None:
    with AnthropicServer() as server:
        p = provider(server)
        system = {"role": "system", "content": "a long stable preamble of rules"}
        first = ask(p, system, {"role": "user", "content": "one"})
        second = ask(p, system, {"role": "user", "content": "two"})
    assert first.usage["cache_write_tokens"] == 6 and "cache_read_tokens" not in first.usage
    assert second.usage == {"prompt_tokens": 7, "completion_tokens": 2, "cache_read_tokens": 6}
    assert server.usages[1]["cache_read_input_tokens"] == 6


def test_prompt_cache_false_sends_no_cache_control() -> None:
    with AnthropicServer() as server:
        ask(provider(server, prompt_cache=False), {"role": "system", "content": "s"},
            {"role": "user", "content": "u"})  # fmt: skip
        body = server.requests[-1].json()
    assert body["system"] == [{"type": "text", "text": "s"}]


def test_default_max_tokens_is_sent_because_the_api_requires_it() -> None:
    with AnthropicServer() as server:
        ask(provider(server, max_tokens=77), {"role": "user", "content": "hi"})
        assert server.requests[-1].json()["max_tokens"] == 77


def test_images_go_before_the_text_as_base64_blocks() -> None:
    image = png()
    with AnthropicServer() as server:
        ask(provider(server), {"role": "user", "content": "what is this", "images": [image]})
        [message] = server.requests[-1].json()["messages"]
    assert message["content"][0]["type"] == "image"
    assert message["content"][0]["source"]["media_type"] == "image/png"
    assert message["content"][1] == {"type": "text", "text": "what is this"}


def test_an_image_type_the_api_cannot_read_is_refused_before_sending() -> None:
    with AnthropicServer() as server:
        with pytest.raises(ProviderError, match="application/octet-stream") as info:
            ask(provider(server), {"role": "user", "content": "x", "images": [b"BM\0\0"]})
        assert not server.requests
    assert info.value.failure is Failure.PERMANENT


def test_a_schema_goes_out_as_a_forced_tool_and_its_input_is_the_reply() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    with AnthropicServer() as server:
        result = ask(provider(server), {"role": "user", "content": "count"}, json_schema=schema)
        body = server.requests[-1].json()
    assert body["tools"][0]["input_schema"] == schema
    assert body["tool_choice"] == {"type": "tool", "name": "reply"}
    assert json.loads(result.text) == {"n": 7}
    assert result.metadata["stop_reason"] == "tool_use"


def test_a_schema_that_is_not_an_object_is_wrapped_and_unwrapped() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    with AnthropicServer() as server:
        result = ask(provider(server), {"role": "user", "content": "list"}, json_schema=schema)
        sent = server.requests[-1].json()["tools"][0]["input_schema"]
    assert sent == {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    assert json.loads(result.text) == ["about list"]


def test_json_format_without_schema_is_asked_after_the_cached_prefix() -> None:
    with AnthropicServer() as server:
        ask(provider(server), {"role": "system", "content": "rules"},
            {"role": "user", "content": "u"}, format="json")  # fmt: skip
        system = server.requests[-1].json()["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert system[1] == {"type": "text", "text": JSON_INSTRUCTION}


def test_stop_sequences_travel_in_params_and_the_stop_is_reported() -> None:
    with AnthropicServer() as server:
        result = ask(provider(server), {"role": "user", "content": "a b STOP c"},
                     params={"stop_sequences": ["STOP"]})  # fmt: skip
    assert result.text == "echo: a b "
    assert result.metadata["stop_reason"] == "stop_sequence"
    assert result.metadata["stop_sequence"] == "STOP"


def test_a_refusal_is_returned_as_a_refusal() -> None:
    with AnthropicServer() as server:
        result = ask(provider(server), {"role": "user", "content": f"{REFUSE} please"})
    assert result.metadata["refusal"] == "I can't help with that."


def test_the_remote_id_is_the_message_id() -> None:
    with AnthropicServer() as server:
        tracker = CallTracker()
        p = provider(server)
        asyncio.run(
            p.generate_text(
                TextRequest(messages=[{"role": "user", "content": "x"}], tracker=tracker)
            )
        )
    assert tracker.remote_id is not None and tracker.remote_id.startswith("msg_")


def test_overloaded_529_is_transient_and_retried() -> None:
    with AnthropicServer() as server:
        p = provider(server)
        req = TextRequest(messages=[{"role": "user", "content": f"{OVERLOAD} hi"}])
        seen: list[ProviderError] = []

        async def no_sleep(_d: float) -> None:
            return None

        result = asyncio.run(
            call_with_retries(
                lambda: p.generate_text(req),
                attempts=3,
                base_delay=0,
                cap=0,
                sleep=no_sleep,
                on_retry=lambda _a, exc, _d: seen.append(exc),
            )
        )
    assert result.text.startswith("echo:")
    [overloaded] = seen
    assert overloaded.status == 529 and overloaded.transient
    assert "Overloaded (type: overloaded_error)" in overloaded.message


@pytest.mark.parametrize(
    ("reply", "failure", "says"),
    [
        (error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute "
               "rate limit", **{"retry-after": "7"}), Failure.TRANSIENT, "rate_limit_error"),
        (error(500, "api_error", "Internal server error"), Failure.TRANSIENT, "api_error"),
        (error(400, "invalid_request_error", "messages: Field required"), Failure.PERMANENT,
         "messages: Field required (type: invalid_request_error)"),
        (error(401, "authentication_error", "invalid x-api-key"), Failure.PERMANENT,
         "authentication_error"),
        (error(413, "request_too_large", "Request exceeds the maximum size"), Failure.PERMANENT,
         "request_too_large"),
        (error(404, "not_found_error", "model: claude-nope"), Failure.PERMANENT,
         "not_found_error"),
    ],
    ids=["429", "500", "400", "401", "413", "404"],
)  # fmt: skip
def test_the_services_error_shapes_are_classified(
    reply: Reply, failure: Failure, says: str
) -> None:
    with AnthropicServer() as server:
        server.queue("POST", "/v1/messages", reply)
        with pytest.raises(ProviderError) as info:
            ask(provider(server), {"role": "user", "content": "x"})
    exc = info.value
    assert exc.failure is failure and says in exc.message, exc.message
    if reply.status == 429:
        assert exc.retry_after == 7.0


def test_what_the_double_refuses_reaches_the_user_unretried() -> None:
    with AnthropicServer() as server:
        p = provider(server, params={"bogus": 1})
        with pytest.raises(ProviderError, match="bogus: Extra inputs are not permitted") as info:
            ask(p, {"role": "user", "content": "x"})
    assert info.value.failure is Failure.PERMANENT


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(fault: Fault) -> None:
    with AnthropicServer() as server:
        p = create(
            "anthropic", {"base_url": server.url + "/v1", "timeout": TIMEOUT}, {"api_key": KEY}
        )
        req = TextRequest(messages=[{"role": "user", "content": "hello"}])
        check_fault(server, "POST", "/v1/messages", lambda: p.generate_text(req), fault)


def test_a_key_echoed_in_an_error_is_masked() -> None:
    with AnthropicServer() as server:
        server.queue("POST", "/v1/messages", error(401, "authentication_error", f"bad key {KEY}"))
        with pytest.raises(ProviderError) as info:
            ask(provider(server), {"role": "user", "content": "x"})
    assert KEY not in info.value.message and "***" in info.value.message


def test_it_honours_no_seed_and_no_stream() -> None:
    p = create("anthropic", {}, {})
    honours = p.honours("text")
    assert honours.field_refusal("seed") is not None
    assert honours.field_refusal("schema") is None and honours.field_refusal("images") is None
    assert "stream" in (honours.param_refusal("stream") or "")
    assert honours.param_refusal("stop_sequences") is None


def test_settings_are_checked() -> None:
    with pytest.raises(ProviderConfigError, match="max_tokens must be >= 1"):
        create("anthropic", {"max_tokens": 0}, {})
    with pytest.raises(ProviderConfigError, match="prompt_cache"):
        create("anthropic", {"prompt_cache": "yes"}, {})


PIPELINE = """\
runner: 1
name: tagging
params:
  items: {type: array, default: ["a fox", "a heron", "an owl"]}
steps:
  tag:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 1
    with:
      messages:
        - {role: system, content: "You tag animals. Keep to the schema."}
      prompt: "Tag ${{ item }}"
      max_tokens: 64
      schema:
        type: object
        properties: {tag: {type: string}, legs: {type: integer}}
        required: [tag, legs]
    check:
      - "${{ output.json.legs == 7 }}"
"""


def test_runner_apply_against_the_double(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", TEST_ANTHROPIC_KEY=KEY)
    with AnthropicServer(api_key=KEY) as server:
        (tmp_path / "runner.toml").write_text(
            f'[general]\ndefault_provider = "anthropic"\n\n[providers.anthropic]\n'
            f'base_url = "{server.url}/v1"\nmodel = "claude-test"\n'
            'api_key_env = "TEST_ANTHROPIC_KEY"\ntimeout = 10\n',
            encoding="utf-8",
        )

        def apply() -> dict[str, Any]:
            done = subprocess.run(
                [*runner_bin(), "apply", "pipeline.yaml", "--json"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert KEY not in done.stdout + done.stderr
            doc: dict[str, Any] = json.loads(done.stdout)
            assert doc["exit_code"] == 0, done.stdout + done.stderr
            return doc

        apply()
        apply()  # converged: nothing is sent again
        assert server.billed == 3 and len(server.requests) == 3
        usages = list(server.usages)
    # One cache write by the first element, reads by the others (concurrency 1: in order).
    assert [u["cache_creation_input_tokens"] for u in usages] == [7, 0, 0]
    assert [u["cache_read_input_tokens"] for u in usages] == [0, 7, 7]
    with sqlite3.connect(tmp_path / ".runner" / "journal.db") as db:
        rows = [json.loads(r[0]) for r in db.execute("SELECT result FROM calls")]
    assert sorted(json.loads(r["text"])["tag"] for r in rows) == [
        "about Tag a fox", "about Tag a heron", "about Tag an owl",
    ]  # fmt: skip
    assert sum(r["usage"].get("cache_read_tokens", 0) for r in rows) == 14
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []
