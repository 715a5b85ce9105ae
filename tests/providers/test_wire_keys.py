"""A paid call's key is the request that goes on the wire: two requests that send the same bytes
share a key, two that send different bytes do not (issue 44: an OpenAI image call keyed a
negative prompt and a seed the images API never receives, and paid again for the same request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from runner.providers import ImageRequest, create
from runner.providers.openai import OpenAIProvider
from runner.providers.requestkey import keyed_fields, request_key
from tests.conftest import Project
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import ProtocolServer, png

# Two values of each keyed field of an image request.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "prompt": ("a fox", "a hare"),
    "negative_prompt": ("", "blurry"),
    "size": ((32, 32), (48, 32)),
    "seed": (1, 2),
    "references": ([png((1, 2, 3), (8, 8))], [png((9, 9, 9), (8, 8))]),
    "params": ({}, {"quality": "low"}),
}


def _openai(server: ProtocolServer) -> OpenAIProvider:
    p = create("openai", {"base_url": server.url + "/v1", "timeout": 10}, {"api_key": "sk-x"})
    assert isinstance(p, OpenAIProvider)
    return p


def _wire(server: ProtocolServer, request: ImageRequest) -> tuple[str, bytes]:
    """The path and body the provider sent for ``request`` (a multipart boundary, random per
    request, made one fixed word)."""
    p = _openai(server)
    before = len(server.requests)
    asyncio.run(p.generate_image(request))
    [rec] = server.requests[before:]
    body = rec.body
    found = re.search(r"boundary=([^;]+)", rec.headers.get("content-type", ""))
    if found:
        body = body.replace(found.group(1).encode(), b"BOUNDARY")
    return rec.path, body


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_an_openai_image_call_is_keyed_by_what_it_sends(field: str) -> None:
    assert set(SAMPLES) == set(keyed_fields(ImageRequest)), "a new request field: sample it"
    with OpenAIServer() as server:
        unsent = _openai(server).not_sent.get("image", frozenset())
        a, b = SAMPLES[field]
        base = ImageRequest(prompt="p")
        req_a = dataclasses.replace(base, **{field: a})
        req_b = dataclasses.replace(base, **{field: b})
        wire_a, wire_b = _wire(server, req_a), _wire(server, req_b)
    key_a = request_key(req_a, "openai@1:x", unsent=unsent)
    key_b = request_key(req_b, "openai@1:x", unsent=unsent)
    assert (key_a != key_b) == (wire_a != wire_b), (field, wire_a, wire_b)


NEGATIVE = """\
runner: 1
name: wire
steps:
  g:
    uses: image
    with: {{prompt: "a cat", n: 2, size: 64x48, negative_prompt: "{negative}", seed: {seed}}}
"""


def test_changing_what_openai_never_receives_pays_for_no_request_again(tmp_path: Path) -> None:
    project = Project(tmp_path)
    with OpenAIServer() as server:
        project.write(
            "runner.toml",
            f"""\
            [general]
            default_provider = "openai"
            [providers.openai]
            base_url = "{server.url}/v1"
            image_model = "test-image"
            api_key_env = "WIRE_TEST_KEY"
            """,
        )
        done = []
        for seed in (1, 5):
            project.write("pipeline.yaml", NEGATIVE.format(negative="", seed=seed))
            res = project.cli("apply", "pipeline.yaml", "--json", env={"WIRE_TEST_KEY": "sk-x"})
            assert res.exit_code == 0, res.stdout + res.stderr
            done.append(server.count("POST", "/v1/images/generations"))
        # A negative prompt the images API has no field for is refused before any request
        # (engine/run/honoured.py), rather than sent nowhere and paid for.
        project.write("pipeline.yaml", NEGATIVE.format(negative="blurry", seed=1))
        res = project.cli("apply", "pipeline.yaml", "--json", env={"WIRE_TEST_KEY": "sk-x"})
        assert res.exit_code == 2 and "does not carry `negative_prompt`" in res.stdout
        bodies = {r.body for r in server.requests}
    # n: 2 asks two images, each its own call (the ordinal tells them apart, not a seed it never
    # sends); the edit of the seed changes no request, so nothing is paid again
    assert done == [2, 2]
    assert len(bodies) == 1
