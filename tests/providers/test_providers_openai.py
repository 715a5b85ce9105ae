"""The openai provider against a local server speaking the OpenAI images and chat protocol."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import httpx
import pytest
from PIL import Image

from runner.errors import Failure, ProviderError
from runner.providers import ImageRequest, TextRequest, create
from runner.providers.base import TextResult
from runner.providers.openai import JSON_INSTRUCTION, OpenAIProvider
from runner.providers.tracking import CallTracker
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Reply, png

KEY = "sk-proj-0123456789abcdef"


def provider(server: OpenAIServer, **settings: object) -> OpenAIProvider:
    p = create(
        "openai", {"base_url": server.url + "/v1", "timeout": TIMEOUT, **settings}, {"api_key": KEY}
    )
    assert isinstance(p, OpenAIProvider)
    return p


def test_generation_sends_the_documented_request() -> None:
    with OpenAIServer() as server:
        p = provider(server)
        req = ImageRequest(
            prompt="a red fox",
            size=(96, 64),
            idempotency_key="key-1",
            params={"quality": "low", "output_format": "png"},
        )
        result = asyncio.run(p.generate_image(req))
        [rec] = server.requests
    assert rec.path == "/v1/images/generations"
    assert rec.headers["authorization"] == f"Bearer {KEY}"
    assert rec.headers["idempotency-key"] == "key-1"
    assert rec.json() == {
        "model": "gpt-image-1",
        "prompt": "a red fox",
        "n": 1,
        "size": "96x64",
        "quality": "low",
        "output_format": "png",
    }
    with Image.open(io.BytesIO(result.image)) as img:
        assert img.size == (96, 64)
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 100, "total_tokens": 107}


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (9, 9, 9)).save(out, format="JPEG")
    return out.getvalue()


def webp() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (9, 9, 9)).save(out, format="WEBP")
    return out.getvalue()


def test_references_go_to_the_edits_endpoint_with_their_real_type_and_extension() -> None:
    refs = [png((1, 2, 3)), jpeg(), webp()]
    with OpenAIServer() as server:
        result = asyncio.run(
            provider(server).generate_image(
                ImageRequest(prompt="same fox, warmer", size=(32, 32), references=refs)
            )
        )
        [rec] = server.requests
    assert rec.path == "/v1/images/edits"
    parts = rec.parts_with_types()
    assert [(f, ct, d) for n, f, ct, d in parts if n == "image[]"] == [
        ("reference-0.png", "image/png", refs[0]),
        ("reference-1.jpg", "image/jpeg", refs[1]),
        ("reference-2.webp", "image/webp", refs[2]),
    ]
    fields = {n: d.decode() for n, f, _ct, d in parts if f is None}
    assert fields == {
        "prompt": "same fox, warmer",
        "model": "gpt-image-1",
        "n": "1",
        "size": "32x32",
    }
    assert result.image.startswith(b"\x89PNG")


def test_a_jpeg_sent_as_png_is_what_the_service_refuses() -> None:
    # What the edit endpoint answers when the declared type lies about the bytes (the old bug).
    with OpenAIServer() as server:
        resp = httpx.post(
            server.url + "/v1/images/edits",
            data={"prompt": "x", "model": "gpt-image-1"},
            files=[("image[]", ("reference-0.png", jpeg(), "image/png"))],
        )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == (
        "Invalid image file or mode for image 1, please check your image file."
    )


def test_a_url_reply_is_downloaded_without_credentials() -> None:
    with OpenAIServer(api_key=KEY) as server:
        p = provider(server, image_model="dall-e-3", project="proj_1", organization="org-1")
        result = asyncio.run(p.generate_image(ImageRequest(prompt="x", size=(16, 16))))
        [generation] = server.requests[:1]
        [download] = server.downloads
    assert generation.headers["authorization"] == f"Bearer {KEY}"
    assert not {"authorization", "api-key", "openai-project", "openai-organization"} & set(
        download.headers
    )
    assert result.image.startswith(b"\x89PNG")
    assert result.metadata["revised_prompt"] == "revised x"


def test_project_and_organization_headers() -> None:
    with OpenAIServer(api_key=KEY, project="proj_right") as server:
        good = provider(server, project="proj_right", organization="org-1")
        asyncio.run(good.generate_text(TextRequest(messages=[{"role": "user", "content": "x"}])))
        [rec] = server.requests
        assert rec.headers["openai-project"] == "proj_right"
        assert rec.headers["openai-organization"] == "org-1"
        with pytest.raises(ProviderError) as info:
            asyncio.run(
                provider(server, project="proj_wrong").generate_text(
                    TextRequest(messages=[{"role": "user", "content": "x"}])
                )
            )
    assert info.value.failure is Failure.PERMANENT and info.value.status == 401
    assert "OpenAI-Project header should match project for API key" in info.value.message
    assert "code: mismatched_project" in info.value.message


def chat(p: OpenAIProvider, **kw: Any) -> TextResult:
    messages = kw.pop("messages", [{"role": "user", "content": "hello"}])
    return asyncio.run(p.generate_text(TextRequest(messages=messages, **kw)))


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("o1", "max_completion_tokens"),
        ("o3-mini", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("gpt-4o-mini", "max_tokens"),
        ("llama3.2", "max_tokens"),
    ],
)
def test_reasoning_models_get_max_completion_tokens(model: str, field: str) -> None:
    with OpenAIServer() as server:
        chat(provider(server, model=model), max_tokens=64)
        body = server.requests[0].json()
    assert body[field] == 64 and len({"max_tokens", "max_completion_tokens"} & set(body)) == 1


def test_max_tokens_param_overrides_the_rule_and_the_service_refuses_the_old_name() -> None:
    with OpenAIServer() as server:
        p = provider(server, model="o3", max_tokens_param="max_tokens")
        with pytest.raises(ProviderError) as info:
            chat(p, max_tokens=64)
        chat(
            provider(server, model="custom", max_tokens_param="max_completion_tokens"), max_tokens=9
        )
        assert server.requests[-1].json()["max_completion_tokens"] == 9
    assert info.value.failure is Failure.PERMANENT
    assert info.value.message.endswith(
        "HTTP 400: Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead. (code: unsupported_parameter, "
        "type: invalid_request_error, param: max_tokens)"
    )


def test_json_object_mode_makes_sure_the_messages_mention_json() -> None:
    with OpenAIServer() as server:
        p = provider(server)
        result = chat(p, format="json", messages=[{"role": "user", "content": "list 3 colours"}])
        first = server.requests[-1].json()
        chat(p, format="json", messages=[{"role": "user", "content": "answer in JSON: hi"}])
        second = server.requests[-1].json()
        # What the service says to a request that does not mention JSON.
        resp = httpx.post(
            server.url + "/v1/chat/completions",
            json={
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_object"},
            },
        )
    assert first["messages"][0] == {"role": "system", "content": JSON_INSTRUCTION}
    assert json.loads(result.text) == {"echo": "list 3 colours"}
    assert len(second["messages"]) == 1  # it already says JSON: sent as it is
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"


def test_structured_output_sends_strict_when_asked() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    with OpenAIServer() as server:
        chat(provider(server), json_schema=schema, format="json")
        plain = server.requests[-1].json()["response_format"]
        chat(provider(server), json_schema=schema, format="json", params={"strict": True})
        asked = server.requests[-1].json()["response_format"]
        chat(provider(server, strict_schema=True), json_schema=schema, format="json")
        by_setting = server.requests[-1].json()["response_format"]
        with pytest.raises(ProviderError) as info:  # strict needs additionalProperties: false
            chat(
                provider(server, strict_schema=True),
                json_schema={"type": "object"},
                format="json",
            )
    assert plain == {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
    posts = [r for r in server.requests if r.method == "POST"]  # a GET /models comes first
    assert asked["json_schema"]["strict"] is True and "strict" not in json.dumps(
        posts[-3].json()["messages"]
    )
    assert by_setting["json_schema"]["strict"] is True
    assert "'additionalProperties' is required to be supplied and to be false" in str(info.value)


def test_a_refusal_is_returned_as_a_refusal() -> None:
    with OpenAIServer() as server:
        result = chat(
            provider(server),
            format="json",
            messages=[{"role": "user", "content": "[[REFUSE]] json"}],
        )
    assert result.text == ""
    assert result.metadata["refusal"] == "I'm sorry, but I can't help with that request."


def test_insufficient_quota_is_permanent_with_the_service_message() -> None:
    with OpenAIServer(quota=0) as server:
        p = provider(server)
        with pytest.raises(ProviderError) as info:
            chat(p)
    assert info.value.failure is Failure.PERMANENT and info.value.status == 429
    assert "You exceeded your current quota, please check your plan and billing details" in (
        info.value.message
    )
    assert "retrying will not help" in info.value.message


@pytest.mark.parametrize(
    "base_url",
    ["/openai/v1", "/openai/deployments/gpt4o?api-version=2024-10-21"],
    ids=["v1", "classic"],
)
def test_azure_openai_both_url_styles_with_the_api_key_header(base_url: str) -> None:
    with OpenAIServer(api_key=KEY) as server:
        # 127.0.0.1 is not *.azure.com: the key header is chosen explicitly, as a proxy would need.
        p = create(
            "openai",
            {"base_url": server.url + base_url, "timeout": TIMEOUT, "api_key_header": "api-key"},
            {"api_key": KEY},
        )
        assert isinstance(p, OpenAIProvider)
        chat(p)
        asyncio.run(p.generate_image(ImageRequest(prompt="fox", size=(16, 16))))
        text, image = server.requests
    path = base_url.split("?")[0]
    assert text.path == f"{path}/chat/completions" and image.path == f"{path}/images/generations"
    for rec in (text, image):
        assert rec.headers["api-key"] == KEY and "authorization" not in rec.headers
        if "deployments" in base_url:
            assert rec.query == {"api-version": ["2024-10-21"]}
        else:
            assert rec.query == {}


def test_azure_hosts_get_the_api_key_header_and_api_version_setting() -> None:
    p = create(
        "openai",
        {
            "base_url": "https://res.openai.azure.com/openai/deployments/d",
            "api_version": "2024-10-21",
        },
        {"api_key": KEY},
    )
    assert isinstance(p, OpenAIProvider)
    assert p.headers()["api-key"] == KEY and "Authorization" not in p.headers()
    assert p.query() == {"api-version": "2024-10-21"}


def test_classic_azure_without_api_version_is_what_azure_refuses() -> None:
    with OpenAIServer(api_key=KEY) as server:
        p = create(
            "openai",
            {"base_url": server.url + "/openai/deployments/d", "api_key_header": "api-key"},
            {"api_key": KEY},
        )
        with pytest.raises(ProviderError) as info:
            chat(p)
    assert info.value.status == 404 and "Resource not found (code: 404)" in info.value.message


def test_remote_id_is_the_completion_id() -> None:
    with OpenAIServer() as server:
        tracker = CallTracker()
        chat(provider(server), tracker=tracker)
    assert tracker.attempts == 1 and (tracker.remote_id or "").startswith("chatcmpl-")


def test_cached_prompt_tokens_are_said_apart_for_their_rate() -> None:
    # OpenAI's usage counts cache hits inside prompt_tokens and again in prompt_tokens_details.
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    }
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    with OpenAIServer() as server:
        server.queue("POST", "/v1/chat/completions", Reply(body=reply))
        result = chat(provider(server))
    assert result.usage == {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "cache_read_tokens": 1920,
    }


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(fault: Fault) -> None:
    with OpenAIServer() as server:
        p = provider(server)
        check_fault(
            server,
            "POST",
            "/v1/images/generations",
            lambda: p.generate_image(ImageRequest(prompt="fox", size=(16, 16))),
            fault,
        )


def test_refused_connection_is_transient() -> None:
    with OpenAIServer() as server:
        url = server.url
    p = create("openai", {"base_url": url + "/v1", "timeout": TIMEOUT})
    with pytest.raises(ProviderError) as info:
        asyncio.run(p.generate_text(TextRequest(messages=[{"role": "user", "content": "x"}])))
    assert info.value.transient and "connection failed" in info.value.message


def test_backend_error_echoing_the_key_is_redacted() -> None:
    with OpenAIServer(api_key="sk-the-right-one") as server, pytest.raises(ProviderError) as info:
        chat(provider(server))
    assert not info.value.transient and info.value.status == 401
    assert KEY not in str(info.value) and "Incorrect API key provided: ***" in str(info.value)
    assert "code: invalid_api_key" in str(info.value)
