"""The a1111 provider against a local server speaking the AUTOMATIC1111 --api protocol."""

from __future__ import annotations

import asyncio
import base64

import pytest

from runner.errors import ProviderError
from runner.providers import ImageRequest, create
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import A1111Server, Reply, png


def test_txt2img_request_and_seed_from_info() -> None:
    with A1111Server() as server:
        p = create("a1111", {"base_url": server.url, "steps": 8})
        result = asyncio.run(
            p.generate_image(
                ImageRequest(
                    prompt="castle",
                    negative_prompt="blurry",
                    size=(64, 32),
                    seed=77,
                    params={"cfg_scale": 5},
                )
            )
        )
        body = server.requests[0].json()
    assert server.requests[0].path == "/sdapi/v1/txt2img"
    assert body["prompt"] == "castle" and body["negative_prompt"] == "blurry"
    assert (body["width"], body["height"], body["seed"], body["steps"]) == (64, 32, 77, 8)
    assert body["cfg_scale"] == 5 and body["batch_size"] == 1 and body["n_iter"] == 1
    assert result.metadata["seed"] == 77 and result.metadata["model"] == "sdxl-test"


def test_no_seed_asks_the_server_and_reports_the_seed_it_used() -> None:
    with A1111Server() as server:
        p = create("a1111", {"base_url": server.url})
        result = asyncio.run(p.generate_image(ImageRequest(prompt="castle", size=(16, 16))))
        assert server.requests[0].json()["seed"] == -1
    assert result.metadata["seed"] == 4242


def test_references_use_img2img_with_init_images() -> None:
    ref = png((9, 9, 9))
    with A1111Server() as server:
        p = create("a1111", {"base_url": server.url})
        asyncio.run(
            p.generate_image(ImageRequest(prompt="c", size=(16, 16), seed=1, references=[ref]))
        )
        rec = server.requests[0]
    assert rec.path == "/sdapi/v1/img2img"
    assert rec.json()["init_images"] == [base64.b64encode(ref).decode()]
    assert rec.json()["denoising_strength"] == 0.75


def test_validation_error_detail_reaches_the_user() -> None:
    detail = {"detail": [{"loc": ["body", "width"], "msg": "value is not a valid integer"}]}
    with A1111Server() as server:
        p = create("a1111", {"base_url": server.url})
        server.queue("POST", "/sdapi/v1/txt2img", Reply(422, detail))
        with pytest.raises(ProviderError) as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="c", size=(16, 16))))
    assert not info.value.transient and info.value.status == 422
    assert "value is not a valid integer" in info.value.message


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(fault: Fault) -> None:
    with A1111Server() as server:
        p = create("a1111", {"base_url": server.url, "timeout": TIMEOUT})
        req = ImageRequest(prompt="x", size=(16, 16), seed=1)
        check_fault(server, "POST", "/sdapi/v1/txt2img", lambda: p.generate_image(req), fault)
