"""The ollama provider against a local server speaking /api/chat and /api/generate."""

from __future__ import annotations

import asyncio
import base64
import os

import httpx
import pytest

from runner.errors import ProviderError
from runner.providers import ImageRequest, TextRequest, create
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import OllamaServer, png


def test_chat_request_and_reply() -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "model": "llama-test", "timeout": TIMEOUT})
        req = TextRequest(
            messages=[
                {"role": "system", "content": "terse"},
                {"role": "user", "content": "hello", "images": [b"img"]},
            ],
            temperature=0.1,
            seed=9,
            max_tokens=30,
            format="json",
        )
        result = asyncio.run(p.generate_text(req))
        body = server.requests[0].json()
    assert server.requests[0].path == "/api/chat"
    assert body["stream"] is False and body["format"] == "json"
    assert body["options"] == {"temperature": 0.1, "seed": 9, "num_predict": 30}
    assert body["messages"][1]["images"] == [base64.b64encode(b"img").decode()]
    assert result.text == '{"echo": "hello"}'
    assert result.usage == {"prompt_tokens": 21, "completion_tokens": 5}


def test_schema_is_sent_as_format_and_generate_endpoint_on_request() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url})
        asyncio.run(
            p.generate_text(
                TextRequest(messages=[{"role": "user", "content": "x"}], json_schema=schema)
            )
        )
        result = asyncio.run(
            p.generate_text(
                TextRequest(
                    messages=[
                        {"role": "system", "content": "sys"},
                        {"role": "user", "content": "q"},
                    ],
                    params={"endpoint": "generate"},
                )
            )
        )
        chat, generate = (r.json() for r in server.requests)
    assert chat["format"] == schema
    assert generate["prompt"] == "q" and generate["system"] == "sys"
    assert result.text == "generated: q"


@pytest.mark.parametrize("model", ["img-single", "img-multi"])
def test_image_models_answer_with_image_or_images(model: str) -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "image_model": model})
        result = asyncio.run(
            p.generate_image(
                ImageRequest(prompt="a boat", size=(40, 30), seed=4, references=[png()])
            )
        )
        body = server.requests[0].json()
    assert body["width"] == 40 and body["options"]["seed"] == 4 and len(body["images"]) == 1
    assert result.image.startswith(b"\x89PNG") and result.metadata["seed"] == 4


def test_a_text_model_asked_for_an_image_is_a_clear_permanent_error() -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "image_model": "llama-text"})
        with pytest.raises(ProviderError, match="is the model an image model") as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="a boat")))
    assert not info.value.transient


def test_missing_model_message_reaches_the_user() -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "model": "missing"})
        with pytest.raises(ProviderError) as info:
            asyncio.run(p.generate_text(TextRequest(messages=[{"role": "user", "content": "x"}])))
    assert not info.value.transient and info.value.status == 404
    assert "model 'missing' not found, try pulling it first" in info.value.message


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(fault: Fault) -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "timeout": TIMEOUT})
        req = TextRequest(messages=[{"role": "user", "content": "x"}])
        check_fault(server, "POST", "/api/chat", lambda: p.generate_text(req), fault)


def _ollama_url() -> str | None:
    url = os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434")
    try:
        httpx.get(url + "/api/tags", timeout=0.5)
    except httpx.HTTPError:
        return None
    return url


@pytest.mark.live
def test_live_local_ollama() -> None:
    url = _ollama_url()
    if url is None:
        pytest.skip("no Ollama server answers on 127.0.0.1:11434")
    tags = httpx.get(url + "/api/tags", timeout=2).json().get("models") or []
    if not tags:
        pytest.skip("the local Ollama has no model pulled")
    p = create("ollama", {"base_url": url, "model": tags[0]["name"], "timeout": 120})
    result = asyncio.run(
        p.generate_text(
            TextRequest(
                messages=[{"role": "user", "content": "Reply with the single word: yes"}],
                temperature=0,
                seed=1,
                max_tokens=5,
            )
        )
    )
    assert result.text.strip()
