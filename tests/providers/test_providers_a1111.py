"""The a1111 provider against a loopback AUTOMATIC1111 --api (queue lock, progress, auth)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from runner.errors import ProviderError
from runner.providers import ImageRequest, ProviderConfigError, create
from runner.providers.base import Provider
from runner.providers.calls import with_provider_retries
from runner.providers.config import Providers, RunnerConfig
from tests.providers.a1111_server import A1111Server
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import Reply, png


def a1111(server: A1111Server, **settings: Any) -> Provider:
    return create("a1111", {"base_url": server.url, "poll_interval": 0.02, **settings})


def run(p: Provider, request: ImageRequest) -> Any:
    return asyncio.run(p.generate_image(request))


def test_txt2img_request_and_seed_from_info() -> None:
    with A1111Server() as server:
        p = a1111(server, steps=8)
        result = run(
            p,
            ImageRequest(
                prompt="castle",
                negative_prompt="blurry",
                size=(64, 32),
                seed=77,
                params={"cfg_scale": 5},
            ),
        )
        body = server.requests[0].json()
    assert server.requests[0].path == "/sdapi/v1/txt2img"
    assert body["prompt"] == "castle" and body["negative_prompt"] == "blurry"
    assert (body["width"], body["height"], body["seed"], body["steps"]) == (64, 32, 77, 8)
    assert body["cfg_scale"] == 5 and body["batch_size"] == 1 and body["n_iter"] == 1
    assert result.metadata["seed"] == 77 and result.metadata["model"] == "sdxl-test"


def test_no_seed_asks_the_server_and_reports_the_seed_it_used() -> None:
    with A1111Server() as server:
        result = run(a1111(server), ImageRequest(prompt="castle", size=(16, 16)))
        assert server.requests[0].json()["seed"] == -1
    assert result.metadata["seed"] == 4242


def test_a_reference_uses_img2img_with_init_images() -> None:
    ref = png((9, 9, 9))
    with A1111Server() as server:
        run(a1111(server), ImageRequest(prompt="c", size=(16, 16), seed=1, references=[ref]))
        rec = server.requests[0]
    assert rec.path == "/sdapi/v1/img2img"
    assert rec.json()["init_images"] == [base64.b64encode(ref).decode()]
    assert rec.json()["denoising_strength"] == 0.75


def test_several_references_are_refused_before_anything_is_sent() -> None:
    refs = [png((1, 1, 1)), png((2, 2, 2))]
    with A1111Server() as server:
        p = a1111(server)
        with pytest.raises(ProviderConfigError, match="gives 2 reference images; A1111's img2img"):
            p.check(references=2)
        p.check(references=1)
        with pytest.raises(ProviderConfigError):
            run(p, ImageRequest(prompt="c", size=(16, 16), references=refs))
        assert server.requests == []


def test_unknown_sampler_shows_a1111s_cause_not_the_exception_class() -> None:
    with A1111Server() as server:
        p = a1111(server, sampler_name="Euler b")
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="c", size=(16, 16)))
        assert server.executions == 0
    assert info.value.message == (
        f"a1111: POST {server.url}/sdapi/v1/txt2img -> HTTP 404: Sampler not found"
    )
    assert not info.value.transient


def test_validation_error_detail_reaches_the_user() -> None:
    with A1111Server() as server:
        p = a1111(server, params={"steps": "many"})
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="c", size=(16, 16)))
    assert not info.value.transient and info.value.status == 422
    assert "value is not a valid integer" in info.value.message and "steps" in info.value.message


def test_basic_auth_from_environment_variables() -> None:
    env = {"A1111_USER": "ada", "A1111_PASSWORD": "s3cret-pw"}
    config = RunnerConfig(
        providers={"a1111": {"username_env": "A1111_USER", "password_env": "A1111_PASSWORD"}}
    )
    with A1111Server(api_auth="ada:s3cret-pw") as server:
        config.providers["a1111"]["base_url"] = server.url
        p = Providers(config, environ=env).get("a1111")
        run(p, ImageRequest(prompt="c", size=(16, 16)))
        assert server.executions == 1
        assert "s3cret-pw" not in p.profile()
        wrong = Providers(config, environ={**env, "A1111_PASSWORD": "nope"}).get("a1111")
        with pytest.raises(ProviderError) as info:
            run(wrong, ImageRequest(prompt="c", size=(16, 16)))
        with pytest.raises(ProviderError) as missing:
            run(Providers(config, environ={}).get("a1111"), ImageRequest(prompt="c", size=(8, 8)))
        assert server.executions == 1
    assert info.value.message.endswith("HTTP 401: Incorrect username or password")
    assert missing.value.message.endswith("HTTP 401: Not authenticated")
    assert not info.value.transient


def test_timeout_shorter_than_the_render_waits_while_progress_shows_work() -> None:
    with A1111Server(render_s=0.8) as server:
        p = a1111(server, timeout=0.2)
        result = asyncio.run(
            with_provider_retries(
                p, lambda: p.generate_image(ImageRequest(prompt="slow", size=(8, 8), seed=2))
            )
        )
        server.wait_idle()
        assert server.executions == 1
        assert server.count("GET", "/sdapi/v1/progress") >= 1
    assert result.metadata["seed"] == 2


def test_one_job_at_a_time_and_each_runs_once() -> None:
    with A1111Server(render_s=0.3) as server:
        p = a1111(server, timeout=0.1)

        async def both() -> list[Any]:
            return list(
                await asyncio.gather(
                    *(
                        p.generate_image(ImageRequest(prompt=f"p{i}", size=(8, 8), seed=i))
                        for i in range(3)
                    )
                )
            )

        results = asyncio.run(both())
        assert server.executions == 3 and server.max_parallel == 1
    assert [r.metadata["seed"] for r in results] == [0, 1, 2]


def test_a_lost_reply_is_maybe_executed_and_not_sent_again() -> None:
    with A1111Server() as server:
        p = a1111(server, timeout=TIMEOUT)
        server.queue("POST", "/sdapi/v1/txt2img", Reply(drop=True))
        with pytest.raises(ProviderError) as info:
            asyncio.run(
                with_provider_retries(
                    p, lambda: p.generate_image(ImageRequest(prompt="x", size=(8, 8)))
                )
            )
        assert server.count("POST", "/sdapi/v1/txt2img") == 1
    assert info.value.maybe_executed


def test_a_stalled_server_is_given_up_as_maybe_executed() -> None:
    with A1111Server() as server:
        # A reply that never comes while /sdapi/v1/progress shows nothing running.
        server.queue("POST", "/sdapi/v1/txt2img", Reply(delay=1.0, body={}))
        p = a1111(server, timeout=0.2)
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="x", size=(8, 8)))
    assert (
        "no reply within 0.2 s (read timeout); the request was sent and /sdapi/v1/progress "
        "showed no work" in info.value.message
    )
    assert info.value.maybe_executed


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(fault: Fault) -> None:
    with A1111Server() as server:
        p = a1111(server, timeout=TIMEOUT)
        req = ImageRequest(prompt="x", size=(16, 16), seed=1)
        check_fault(server, "POST", "/sdapi/v1/txt2img", lambda: p.generate_image(req), fault)
