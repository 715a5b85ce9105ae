"""The image step: iterations, idempotency keys, ledger reuse, concurrency cap, failures, logs."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from runner.errors import StepFailure
from runner.providers import ImageRequest, ImageResult, Provider, create
from runner.providers.fake import FakeProvider
from runner.steps.base import ResultStatus, StepEnv, StepResult
from runner.steps.image import ImageStep
from tests.providers.a1111_server import A1111Server
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Reply, png
from tests.providers.stepkit import MemoryLedger, make_ctx, make_env

SECRET = "sk-live-5e2c1f0a9b8d7c6e"


def run(
    env: StepEnv, args: dict[str, Any], ledger: MemoryLedger | None = None, run_id: str = "run-1"
) -> StepResult:
    return asyncio.run(ImageStep().run(make_ctx(env, ledger, run_id=run_id), dict(args)))


class Access:
    """A ProviderAccess handing out one given provider instance."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def get(self, name: str | None) -> Provider:
        return self.provider

    def default_name(self) -> str:
        return self.provider.name


class Gauge(FakeProvider):
    """The fake, measuring how many calls are in flight at once; seed 2 fails permanently."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_flight = 0
        self.peak = 0

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if request.params.get("fail_seed") == request.seed:
                raise self.error("seed refused by the test", transient=False, status=400)
            return await super().generate_image(request)
        finally:
            self.in_flight -= 1


def gauge_env(tmp_path: Path, **settings: Any) -> tuple[StepEnv, Gauge]:
    env = make_env(tmp_path)
    gauge = Gauge(settings=settings)
    env.providers = Access(gauge)
    return env, gauge


def test_n_iterations_get_distinct_keys_seeds_and_stored_images(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    ledger = MemoryLedger()
    result = run(env, {"prompt": "a harbour at dawn", "n": 4, "size": "160x90", "seed": 10}, ledger)
    its = result.output["iterations"]
    assert [it["ordinal"] for it in its] == [1, 2, 3, 4]
    assert [it["seed"] for it in its] == [10, 11, 12, 13]
    assert all(it["status"] == "completed" for it in its)
    assert len({it["idempotency_key"] for it in its}) == 4
    assert all(len(it["idempotency_key"]) == 32 for it in its)
    assert len({it["raw"] for it in its}) == 4 and result.artifacts == [it["raw"] for it in its]
    with Image.open(io.BytesIO(env.objects.read_bytes(its[0]["raw"]))) as img:
        assert img.size == (160, 90)
    assert result.output["provider_profile"] == create("fake").profile()
    for it in its:  # begun before the call, completed after, with the stored digest
        key = it["idempotency_key"]
        assert ledger.ops.index(("begin", key)) < ledger.ops.index(("complete", key))
        assert ledger.entries[key]["result"]["digest"] == it["raw"]
        assert (env.state_dir / "logs" / "runs" / "run-1" / f"{key}.out").is_file()
        assert not (env.state_dir / "logs" / "runs" / "run-1" / f"{key}.err").exists()
    assert result.status is ResultStatus.OK and result.usage == {"images": 4}


def test_ledger_reuse_never_calls_the_provider_again(tmp_path: Path) -> None:
    with A1111Server() as server:
        env = make_env(
            tmp_path,
            f'[general]\ndefault_provider = "a1111"\n'
            f'[providers.a1111]\nbase_url = "{server.url}"\n',
        )
        ledger = MemoryLedger()
        args = {"prompt": "castle", "n": 3, "size": [32, 32], "video_id": "v1"}
        first = run(env, args, ledger)
        assert server.count("POST", "/sdapi/v1/txt2img") == 3
        second = run(env, args, ledger, run_id="run-2")
        assert server.count("POST", "/sdapi/v1/txt2img") == 3  # nothing paid twice
    assert [it["raw"] for it in second.output["iterations"]] == (
        [it["raw"] for it in first.output["iterations"]]
    )
    # the ledger answered: told in the report, not in the output (a fresh run's value)
    assert second.report == {
        "reused_calls": [it["idempotency_key"] for it in first.output["iterations"]]
    }


def test_dedupe_run_scopes_keys_to_the_run(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    args = {"prompt": "p", "size": "32x32"}
    plain = [
        run(env, args, run_id=r).output["iterations"][0]["idempotency_key"] for r in ("a", "b")
    ]
    scoped = [
        run(env, {**args, "dedupe_run": True}, run_id=r).output["iterations"][0]["idempotency_key"]
        for r in ("a", "b")
    ]
    assert plain[0] == plain[1] and scoped[0] != scoped[1]


def test_a_seedless_provider_folds_the_ordinal_into_the_key(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        # dall-e-3 revises prompts (the GPT image models do not) and answers with a URL.
        config = f'[providers.openai]\nbase_url = "{server.url}/v1"\nimage_model = "dall-e-3"\n'
        env = make_env(tmp_path, config)
        result = run(env, {"prompt": "fox", "n": 3, "size": "32x32", "provider": "openai"})
        keys = [r.headers["idempotency-key"] for r in server.requests if r.method == "POST"]
    its = result.output["iterations"]
    assert [it["seed"] for it in its] == [None, None, None]
    assert len(set(keys)) == 3 and set(keys) == {it["idempotency_key"] for it in its}
    assert its[0]["metadata"]["revised_prompt"] == "revised fox"


def test_concurrency_cap_holds(tmp_path: Path) -> None:
    env, gauge = gauge_env(tmp_path, delay_ms=60, max_concurrency=8)
    start = time.perf_counter()
    run(env, {"prompt": "p", "n": 8, "size": "16x16", "concurrency": 3})
    elapsed = time.perf_counter() - start
    assert gauge.peak == 3 and elapsed >= 0.18  # three waves of 60 ms at least
    env, gauge = gauge_env(tmp_path, delay_ms=20, max_concurrency=2)
    run(env, {"prompt": "p", "n": 6, "size": "16x16", "concurrency": 16})
    assert gauge.peak == 2  # the provider's own cap wins


def test_parallel_calls_overlap(tmp_path: Path) -> None:
    env, gauge = gauge_env(tmp_path, delay_ms=200, max_concurrency=4)
    run(env, {"prompt": "p", "n": 4, "size": "16x16", "concurrency": 4})
    assert gauge.peak == 4  # all four were in the server at once (a wall-time bound measured load)


def test_one_failing_iteration_is_collected_and_the_others_complete(tmp_path: Path) -> None:
    env, _gauge = gauge_env(tmp_path)
    ledger = MemoryLedger()
    result = run(
        env, {"prompt": "p", "n": 3, "size": "16x16", "seed": 1, "params": {"fail_seed": 2}}, ledger
    )
    statuses = [(it["ordinal"], it["status"]) for it in result.output["iterations"]]
    assert statuses == [(1, "completed"), (2, "failed"), (3, "completed")]
    failed = result.output["iterations"][1]
    assert "seed refused by the test" in failed["error"] and failed["raw"] is None
    assert ("fail", failed["idempotency_key"]) in ledger.ops
    # partial: the next apply runs the step again (the ledger answers the completed calls);
    # finalize runs on the rest with `on_partial: continue`
    assert result.status is ResultStatus.PARTIAL and len(result.artifacts) == 2
    assert (result.output["completed"], result.output["failed"]) == (2, 1)


def test_every_iteration_failing_raises_with_the_reasons(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    ledger = MemoryLedger()
    with pytest.raises(StepFailure) as info:
        run(env, {"prompt": "x [[FAIL_PERMANENT]]", "n": 4, "size": "16x16"}, ledger)
    assert "all 4 image iterations failed" in info.value.reason
    assert info.value.reason.count("[[FAIL_PERMANENT]]") == 4 and not info.value.retryable
    assert env.providers is not None and env.providers.get(None).calls == 4  # no retries
    assert [op for op, _k in ledger.ops].count("fail") == 4
    assert info.value.output is not None and info.value.output["failed"] == 4


def test_transient_failures_that_outlast_the_retries_make_the_step_retryable(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path, "[providers.fake]\nmax_retries = 1\n")
    with pytest.raises(StepFailure) as info:
        run(env, {"prompt": "x [[FAIL_TRANSIENT:5]]", "n": 2, "size": "16x16"})
    assert info.value.retryable and "transient failure 2 of 5" in info.value.reason


def test_transient_failures_are_retried_and_logged(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = run(env, {"prompt": "x [[FAIL_TRANSIENT:2]]", "n": 2, "size": "16x16"})
    assert all(it["status"] == "completed" for it in result.output["iterations"])
    key = result.output["iterations"][0]["idempotency_key"]
    err = (env.state_dir / "logs" / "runs" / "run-1" / f"{key}.err").read_text()
    assert err.count('"event": "retry"') == 2 and "transient failure 1 of 2" in err


def test_references_from_the_store_reach_the_provider(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    ref = env.objects.put_bytes(png((250, 10, 200), (20, 20)))
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "r.png").write_bytes(png((250, 10, 200), (20, 20)))
    with_ref = run(env, {"prompt": "p", "size": "200x100", "references": [ref]})
    by_path = run(env, {"prompt": "p", "size": "200x100", "references": ["refs/r.png"]})
    without = run(env, {"prompt": "p", "size": "200x100"})
    raw = with_ref.output["iterations"][0]["raw"]
    with Image.open(io.BytesIO(env.objects.read_bytes(raw))) as img:
        assert img.convert("RGB").getpixel((0, 0)) == (250, 10, 200)
    assert by_path.output["iterations"][0]["raw"] == raw
    assert (
        with_ref.output["iterations"][0]["idempotency_key"]
        != without.output["iterations"][0]["idempotency_key"]
    )


def test_key_extra_is_the_provider_profile(tmp_path: Path) -> None:
    env = make_env(tmp_path, "[providers.fake]\nsupports_seed = false\n")
    assert ImageStep().key_extra({"prompt": "p"}, env) == {
        "provider": create("fake", {"supports_seed": False}).profile()
    }


def test_the_api_key_appears_in_no_log_or_message(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        env = make_env(
            tmp_path,
            f'[general]\ndefault_provider = "openai"\n'
            f'[providers.openai]\nbase_url = "{server.url}/v1"\n'
            f'api_key_env = "TEST_OPENAI_KEY"\nmax_retries = 0\n',
            environ={"TEST_OPENAI_KEY": SECRET},
        )
        ok = run(env, {"prompt": "fine", "size": "16x16"})
        server.queue(
            "POST",
            "/v1/images/generations",
            Reply(
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {SECRET}. Authorization: Bearer {SECRET}"
                    }
                },
            ),
        )
        with pytest.raises(StepFailure) as info:
            run(env, {"prompt": "refused", "size": "16x16"})
        assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    assert ok.output["iterations"][0]["status"] == "completed"
    assert SECRET not in info.value.reason and "Incorrect API key provided: ***" in (
        info.value.reason
    )
    logs = list((env.state_dir / "logs").rglob("*"))
    assert any(p.suffix == ".err" and p.stat().st_size for p in logs)
    for path in logs:
        if path.is_file():
            assert SECRET not in path.read_text(), path
