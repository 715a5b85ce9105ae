"""The openai provider against a local server speaking the OpenAI images and chat protocol."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import pytest
from PIL import Image

from runner.errors import ProviderError
from runner.providers import ImageRequest, TextRequest, create
from runner.providers.openai import OpenAIProvider
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import OpenAIServer, Reply, png

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
    assert result.metadata["revised_prompt"] == "revised a red fox"
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 100, "total_tokens": 107}


def test_references_go_to_the_edits_endpoint_as_multipart() -> None:
    refs = [png((1, 2, 3)), png((4, 5, 6))]
    with OpenAIServer() as server:
        result = asyncio.run(
            provider(server).generate_image(
                ImageRequest(prompt="same fox, warmer", size=(32, 32), references=refs)
            )
        )
        [rec] = server.requests
    assert rec.path == "/v1/images/edits"
    parts = rec.parts()
    assert [d for n, _f, d in parts if n == "image[]"] == refs
    fields = {n: d.decode() for n, f, d in parts if f is None}
    assert fields == {
        "prompt": "same fox, warmer",
        "model": "gpt-image-1",
        "n": "1",
        "size": "32x32",
    }
    assert result.image.startswith(b"\x89PNG")


def test_a_url_reply_is_downloaded_without_credentials() -> None:
    with OpenAIServer() as server:
        server.queue(
            "POST",
            "/v1/images/generations",
            Reply(body={"data": [{"url": server.url + "/files/img.png"}]}),
        )
        result = asyncio.run(provider(server).generate_image(ImageRequest(prompt="x")))
        download = server.requests[-1]
    assert download.path == "/files/img.png" and "authorization" not in download.headers
    assert result.image == png((1, 2, 3))


def test_chat_completion_with_json_format_and_images() -> None:
    with OpenAIServer() as server:
        req = TextRequest(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi", "images": [b"abc"]},
            ],
            temperature=0.2,
            seed=5,
            format="json",
            max_tokens=50,
        )
        result = asyncio.run(provider(server, model="gpt-test").generate_text(req))
        body = server.requests[0].json()
    assert body["model"] == "gpt-test" and body["seed"] == 5 and body["temperature"] == 0.2
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] == 50
    image_part = body["messages"][1]["content"][1]
    assert image_part["image_url"]["url"] == "data:image/png;base64," + (
        base64.b64encode(b"abc").decode()
    )
    assert json.loads(result.text) == {"echo": "hi"}
    assert result.usage == {"prompt_tokens": 11, "completion_tokens": 3}


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
    with OpenAIServer() as server:
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}."}}),
        )
        with pytest.raises(ProviderError) as info:
            asyncio.run(
                provider(server).generate_text(
                    TextRequest(messages=[{"role": "user", "content": "x"}])
                )
            )
    assert not info.value.transient and info.value.status == 401
    assert KEY not in str(info.value) and "Incorrect API key provided: ***" in str(info.value)
