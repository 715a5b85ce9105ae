"""The ollama provider against a local server speaking /api/chat and /api/generate."""

from __future__ import annotations

import asyncio
import base64
import json
import os

import httpx
import pytest

from runner.errors import Failure, ProviderError
from runner.providers import ImageRequest, TextRequest, create
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.ollama_server import OllamaServer
from tests.providers.servers import png


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
def test_experimental_image_models_answer_with_image_or_images(model: str) -> None:
    with OllamaServer(experimental_images=True) as server:
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
    assert info.value.message.endswith("HTTP 404: model 'missing' not found")


def test_current_ollama_refusing_image_models_reaches_the_user() -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "image_model": "x/z-image-turbo"})
        with pytest.raises(ProviderError) as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="a boat", size=(32, 32))))
    assert info.value.failure is Failure.PERMANENT and info.value.status == 400
    assert "HTTP 400: image generation models are not currently supported" in str(info.value)


def test_the_image_api_is_marked_experimental_in_runner_providers() -> None:
    from click.testing import CliRunner

    from runner.surfaces.cli.app import cli

    doc = json.loads(CliRunner().invoke(cli, ["providers", "--no-probe", "--json"]).stdout)
    caps = {p["name"]: p["capabilities"] for p in doc["providers"]}
    assert caps["ollama"]["experimental"] == ["image"] and caps["openai"]["experimental"] == []
    text = CliRunner().invoke(cli, ["providers", "--no-probe"]).stdout
    assert "kinds=image (experimental),text" in text


@pytest.mark.parametrize("endpoint", ["chat", "generate"])
def test_stream_true_from_params_is_read_as_ndjson(endpoint: str) -> None:
    with OllamaServer() as server:
        p = create("ollama", {"base_url": server.url, "model": "llama-test"})
        req = TextRequest(
            messages=[{"role": "user", "content": "tell me a long story"}],
            params={"stream": True, "endpoint": endpoint},
        )
        result = asyncio.run(p.generate_text(req))
        body = server.requests[0].json()
        [reply] = server.requests
    assert body["stream"] is True and server.generations == 1 and reply.path == f"/api/{endpoint}"
    said = "ollama says" if endpoint == "chat" else "generated"
    assert result.text == f"{said}: tell me a long story"
    assert result.usage == {"prompt_tokens": 21, "completion_tokens": 5}
    assert result.metadata["done_reason"] == "stop"


def test_an_error_line_mid_stream_fails_with_ollamas_message() -> None:
    with OllamaServer(fail_mid_stream=True) as server:
        p = create("ollama", {"base_url": server.url, "model": "llama-test"})
        req = TextRequest(
            messages=[{"role": "user", "content": "hi there"}], params={"stream": True}
        )
        with pytest.raises(ProviderError) as info:
            asyncio.run(p.generate_text(req))
    assert info.value.message.endswith(
        "the stream failed: an error was encountered while running the model"
    )


def test_the_double_streams_when_stream_is_left_out_as_ollama_does() -> None:
    with OllamaServer() as server:
        resp = httpx.post(
            server.url + "/api/chat",
            json={"model": "llama-test", "messages": [{"role": "user", "content": "a b"}]},
        )
    lines = [json.loads(line) for line in resp.text.splitlines()]
    assert resp.headers["content-type"] == "application/x-ndjson"
    assert [line["done"] for line in lines] == [False, False, True]


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
