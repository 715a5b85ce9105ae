"""Provider calls are bounded by the provider, not by CPU slots; pools spread them over backends.

Every figure is measured server-side by loopback servers (tests/providers/loadserver.py): calls
in flight at once, calls served, TCP connections accepted.
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from runner.errors import ProviderError
from runner.providers import (
    ImageRequest,
    Provider,
    ProviderConfigError,
    Providers,
    RunnerConfig,
    TextRequest,
    create,
)
from runner.providers.calls import with_provider_retries
from runner.providers.jobs import RemoteJob
from runner.providers.pool import notices
from tests.conftest import Project
from tests.providers.comfy_server import ComfyUIServer
from tests.providers.loadserver import LoadServer, refusing_url
from tests.providers.servers import Reply

COMFY_DATA = Path(__file__).parent.parent / "data" / "comfyui"

FAN_OUT = """\
runner: 1
name: fan
params:
  items: {type: array, default: []}
steps:
  ask:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 16
    with: {prompt: "say ${{ item }}"}
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^ok say"}}
"""

TWO_STEPS = """\
runner: 1
name: two
steps:
  left:
    uses: llm
    for_each: "${{ [1, 2, 3, 4, 5, 6, 7, 8] }}"
    concurrency: 8
    with: {prompt: "left ${{ item }}"}
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^ok"}}
  right:
    uses: llm
    for_each: "${{ [1, 2, 3, 4, 5, 6, 7, 8] }}"
    concurrency: 8
    with: {prompt: "right ${{ item }}"}
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^ok"}}
"""


def _config(project: Project, url: str, max_concurrency: int) -> None:
    project.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "openai"

        [providers.openai]
        base_url = "{url}/v1"
        model = "test-chat"
        max_concurrency = {max_concurrency}
        retry_base_delay = 0.01
        """,
    )


def test_llm_for_each_reaches_its_concurrency_with_default_jobs(project: Project) -> None:
    with LoadServer(delay=0.2) as server:
        _config(project, server.url, 16)
        project.write("pipeline.yaml", FAN_OUT)
        items = ",".join(f'"e{i}"' for i in range(48))
        doc = project.apply("-p", f"items=[{items}]")  # --jobs at its default (the core count)
    assert doc["_exit"] == 0, doc["_stderr"]
    assert doc["steps"][0]["elements"] == {"total": 48, "ran": 48}
    assert server.served == 48 and server.max_in_flight == 16
    # one client for the run: connections are kept alive and reused, not one per call
    assert server.connections <= 16


def test_provider_max_concurrency_holds_across_steps(project: Project) -> None:
    with LoadServer(delay=0.1) as server:
        _config(project, server.url, 3)
        project.write("pipeline.yaml", TWO_STEPS)
        doc = project.apply("--jobs", "8")
    assert doc["_exit"] == 0, doc["_stderr"]
    assert server.served == 16 and server.max_in_flight == 3


def _pool(urls: list[str], **extra: object) -> Providers:
    section = {
        "type": "openai",
        "backends": [{"url": f"{u}/v1", "max_concurrency": 2} for u in urls],
        "max_retries": 0,  # a refused call goes to another backend without a retry
        **extra,
    }
    return Providers(RunnerConfig(providers={"farm": section}), environ={}, keep_clients=True)


async def _ask(providers: Providers, n: int) -> list[str]:
    provider = providers.get("farm")

    async def one(k: int) -> str:
        request = TextRequest(messages=[{"role": "user", "content": f"q{k}"}])
        result = await with_provider_retries(provider, lambda: provider.generate_text(request))
        return result.text

    try:
        return await asyncio.gather(*(one(k) for k in range(n)))
    finally:
        await providers.aclose()


def test_pool_routes_around_a_dead_backend_within_each_backends_limit() -> None:
    dead = refusing_url()
    with LoadServer(delay=0.05) as a, LoadServer(delay=0.05) as b:
        providers = _pool([dead, a.url, b.url], probe_interval=60)
        replies = asyncio.run(_ask(providers, 24))
        assert replies == [f"ok q{k}" for k in range(24)]  # every call completed
        assert a.served + b.served == 24
        assert a.max_in_flight <= 2 and b.max_in_flight <= 2  # each backend's own limit
        assert a.max_in_flight == 2 and b.max_in_flight == 2
        farm = providers.get("farm")
        down = farm.pool.find(f"{dead}/v1")
        assert down is not None and not down.healthy
        # only the calls sent before it was marked down went there (at most its limit at once)
        assert down.calls == down.refused <= 2
        assert farm.capabilities.max_concurrency == 6


def test_a_down_backend_is_probed_again_and_taken_back() -> None:
    dead = refusing_url()
    with LoadServer(delay=0.02) as a:
        providers = _pool([dead, a.url], probe_interval=0.05)
        asyncio.run(_ask(providers, 4))
        farm = providers.get("farm")
        back = farm.pool.find(f"{dead}/v1")
        assert back is not None and not back.healthy
        port = urlsplit(dead).port
        assert port is not None
        with LoadServer(delay=0.02, port=port) as revived:
            asyncio.run(asyncio.sleep(0.1))  # its probe is due
            asyncio.run(_ask(providers, 8))
        assert back.healthy and revived.served >= 1


def test_all_backends_down_the_call_waits_max_wait_then_fails_unsent() -> None:
    # A refused connection sent nothing: the call waits for a probe to find a backend back,
    # however many attempts that takes, but no longer than max_wait; then it fails for good.
    providers = _pool([refusing_url(), refusing_url()], max_wait=0.6, probe_interval=0.05)
    began = time.monotonic()
    with pytest.raises(ProviderError) as info:
        asyncio.run(_ask(providers, 1))
    assert 0.6 <= time.monotonic() - began < 5
    assert not info.value.transient
    assert "down since" in str(info.value) and "no answer within max_wait = 0.6 s" in str(
        info.value
    )
    farm = providers.get("farm")
    assert all(b.refused >= 2 for b in farm.pool.backends)  # probed again while it waited


def test_a_backend_going_down_and_back_is_said_at_once_with_the_calls_waiting() -> None:
    # The pool's only backend refuses: the first refusal is told at once (with the time and
    # how many calls wait), the probe interval starts at 0.05 s and doubles, and the backend's
    # return is told too. Every call then completes: none was sent while it was down.
    port = urlsplit(refusing_url()).port
    assert port is not None
    lines: list[str] = []
    providers = _pool([f"http://127.0.0.1:{port}"], probe_interval=0.05, max_wait=20)

    async def scenario() -> list[str]:
        with notices(lines.append):
            asking = asyncio.create_task(_ask(providers, 3))
            while not any("probing every 0.2 s" in line for line in lines):
                await asyncio.sleep(0.01)
            with LoadServer(delay=0.01, port=port) as revived:
                replies = await asking
                assert revived.served == 3
            return replies

    assert asyncio.run(scenario()) == ["ok q0", "ok q1", "ok q2"]
    down = [line for line in lines if " down since " in line]
    assert down[0].startswith(f"backend http://127.0.0.1:{port}/v1 (farm) down since ")
    assert "probing every 0.05 s; 3 calls waiting" in down[0], down[0]
    assert "probing every 0.1 s" in down[1] and "probing every 0.2 s" in down[2], down
    assert lines[-1].startswith(f"backend http://127.0.0.1:{port}/v1 (farm) is back after ")


def test_profile_does_not_depend_on_the_backends() -> None:
    one = create("openai", {"base_url": "http://a:1/v1"})
    pool = create(
        "openai",
        {"base_urls": ["http://b:1/v1", "http://c:1/v1"], "backends": [{"url": "http://d:1/v1"}]},
    )
    assert one.profile() == pool.profile() == create("openai").profile()
    assert [b.url for b in pool.pool.backends] == [
        "http://b:1/v1",
        "http://c:1/v1",
        "http://d:1/v1",
    ]
    assert create("openai", {"model": "other"}).profile() != one.profile()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"base_urls": "http://a"}, "base_urls must be a list"),
        ({"backends": [{"url": "http://a", "max_concurrency": 0}]}, "max_concurrency must be"),
        ({"backends": [{"url": "http://a", "wieght": 2}]}, "unknown key(s) wieght"),
        ({"backends": [{"url": "ftp://a"}]}, "http:// or https://"),
        ({"base_urls": ["http://a", "http://a/"]}, "listed twice"),
    ],
)
def test_bad_backends_are_config_errors(settings: dict[str, object], message: str) -> None:
    provider = create("openai", settings)
    with pytest.raises(ProviderConfigError, match="provider 'openai'") as info:
        provider.capabilities  # noqa: B018  (the pool is read on first use)
    assert message in str(info.value)


def test_runner_toml_backend_tables(tmp_path: Path) -> None:
    (tmp_path / "runner.toml").write_text(
        textwrap.dedent(
            """\
            [providers.farm]
            type = "a1111"
            base_urls = ["http://gpu1:7860"]

            [[providers.farm.backends]]
            url = "http://gpu2:7860"
            max_concurrency = 3
            weight = 2
            """
        ),
        encoding="utf-8",
    )
    farm = Providers.for_dir(tmp_path, environ={}).get("farm")
    assert [(b.url, b.max_concurrency, b.weight) for b in farm.pool.backends] == [
        ("http://gpu1:7860", 1, 1.0),
        ("http://gpu2:7860", 3, 2.0),
    ]
    assert farm.capabilities.max_concurrency == 4


def test_runner_providers_probes_each_backend(project: Project) -> None:
    dead = refusing_url()
    with LoadServer(delay=0) as live:
        project.write(
            "runner.toml",
            f"""\
            [providers.farm]
            type = "openai"
            base_urls = ["{live.url}/v1", "{dead}/v1"]
            max_concurrency = 3
            """,
        )
        res = project.cli("providers", "--json")
        text = project.cli("providers")
    assert res.exit_code == 0, res.stderr
    [fake, farm] = res.json["configured"]
    assert fake["name"] == "fake" and fake["default"] and fake["backends"] == []
    assert farm["type"] == "openai" and farm["max_concurrency"] == 6
    up, down = farm["backends"]
    assert up["url"] == f"{live.url}/v1" and up["health"] == "up" and up["max_concurrency"] == 3
    assert down["health"] == "down" and "ConnectError" in down["error"]
    assert f"{dead}/v1  down" in text.stdout
    assert {p["name"] for p in res.json["providers"]} >= {"fake", "openai", "comfyui"}
    quiet = project.cli("providers", "--json", "--no-probe").json["configured"][1]["backends"]
    assert all("health" not in b for b in quiet)


def test_runner_providers_shows_a_bad_section(project: Project) -> None:
    project.write("runner.toml", '[providers.farm]\ntype = "openai"\nbase_urls = "http://a"\n')
    res = project.cli("providers", "--json", "--no-probe")
    assert res.exit_code == 0
    [_fake, farm] = res.json["configured"]
    assert farm["name"] == "farm" and "base_urls must be a list" in farm["error"]


def test_a_remote_job_re_attaches_at_the_backend_that_has_it(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(COMFY_DATA / "sd15_api.json", flows / "sd15_api.json")
    subs = {"prompt": "6.inputs.text", "seed": "3.inputs.seed"}

    def farm(urls: list[str], timeout: float) -> Provider:
        settings = {"base_urls": urls, "workflow": "flows/sd15_api.json", "substitutions": subs}
        settings.update(poll_interval=0.01, timeout=timeout)
        return create("comfyui", settings, base_dir=tmp_path)

    with ComfyUIServer(render_s=0.3) as one, ComfyUIServer(render_s=0.3) as two:
        journal: list[dict[str, object] | None] = []
        job = RemoteJob("k", recorder=lambda j: journal.append(dict(j) if j else None))
        request = ImageRequest(prompt="far", seed=1, idempotency_key="k", job=job)
        with pytest.raises(ProviderError, match=r"still (queued|running)"):
            asyncio.run(farm([one.url, two.url], 0.05).generate_image(request))
        held = journal[-1]
        assert held is not None and held["backend"] == one.url  # the first of two idle ones
        # The next apply lists the farm the other way round: the job is asked for where it is.
        later = RemoteJob("k", known=held)
        again = ImageRequest(prompt="far", seed=1, idempotency_key="k", job=later)
        result = asyncio.run(farm([two.url, one.url], 5).generate_image(again))
        one.wait_idle()
        assert one.count("POST", "/prompt") == 1 and two.count("POST", "/prompt") == 0
        assert two.requests == [] and one.total_executions() == 1
    assert result.metadata["backend"] == one.url and result.metadata["reattached"] is True


def test_a_call_pinned_to_a_refusing_backend_is_not_rerouted() -> None:
    dead = refusing_url()
    with LoadServer(delay=0) as live:
        farm = create(
            "openai",
            {"base_urls": [f"{live.url}/v1", f"{dead}/v1"], "max_retries": 0, "max_wait": 0.5},
        )

        async def pinned() -> None:
            async def fn() -> None:
                async with farm.client(backend=f"{dead}/v1") as client:  # type: ignore[attr-defined]
                    await farm.send(client, "POST", "chat/completions", json={})  # type: ignore[attr-defined]

            await with_provider_retries(farm, fn)

        with pytest.raises(ProviderError, match=f"{dead}/v1 down since .* max_wait = 0.5 s"):
            asyncio.run(pinned())
        assert live.served == 0  # it went to the pinned backend only, never elsewhere


def test_a_long_retry_wait_is_said_on_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 503 asking to come back later: the wait is told with the backend's words, not only
    # logged (a long Retry-After was a silent pause on the terminal).
    from runner.providers import calls

    monkeypatch.setattr(calls, "SAY_WAITS_FROM", 0.2)
    with LoadServer(delay=0) as server:
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(503, {"error": {"message": "busy loading"}}, headers={"Retry-After": "0.3"}),
        )
        farm = create(
            "openai",
            {"base_url": f"{server.url}/v1", "retry_base_delay": 0.01, "retry_max_delay": 0.01},
        )
        lines: list[str] = []

        async def scenario() -> str:
            request = TextRequest(messages=[{"role": "user", "content": "q"}])
            with notices(lines.append):
                result = await with_provider_retries(farm, lambda: farm.generate_text(request))
            return result.text

        assert asyncio.run(scenario()) == "ok q"
    [said] = lines
    assert said.startswith("openai: POST http://127.0.0.1:"), said  # the whole URL asked
    assert "/v1/chat/completions -> HTTP 503: busy loading" in said, said
    assert said.endswith("(attempt 1; retrying in 0.3 s)"), said
