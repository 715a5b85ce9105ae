"""Live: runner through LiteLLM's proxy (a real gateway) in front of llama.cpp's real server.

What a team puts between its code and its models answers as a gateway does: a 5xx of its own
when the model behind it is down, the model's reply when it is up. A counting proxy between the
gateway and the model says what reached the model.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .kit import Run, executions, runner, start_runner, write
from .proxy import CountingProxy
from .servers import LITELLM_KEY, Server

pytestmark = pytest.mark.live

KEY_VAR = "LIVE_GATEWAY_KEY"


def config(root: Path, url: str, **extra: Any) -> None:
    settings = {
        "type": "openai",
        "base_url": f"{url}/v1",
        "model": "tiny",
        "timeout": 60,
        "api_key_env": KEY_VAR,
        "retry_base_delay": 0.05,
        "retry_max_delay": 0.2,
        **extra,
    }
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    write(root, "runner.toml", f'[general]\ndefault_provider = "gw"\n\n[providers.gw]\n{lines}')


def pipeline(root: Path, step: str) -> None:
    write(root, "pipeline.yaml", "runner: 1\nname: gateway\nsteps:\n" + step)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, LITELLM_KEY)


def _reached(upstream: CountingProxy, since: int) -> bytes:
    return bytes(upstream.inbound[since:])


ASK = """\
  ask:
    uses: llm
    retries: 3
    with:
      prompt: "Say something."
      seed: 7
      max_tokens: 16
    check:
      - {expr: "output.text | length > 0"}
"""


def test_a_gateway_5xx_while_its_model_is_down_is_retried_with_the_users_own_prompt(
    tmp_path: Path, gateway: Server, llama: Server, upstream: CountingProxy
) -> None:
    """The model behind the gateway is down for a few seconds: LiteLLM answers 500 (its own
    InternalServerError). runner retries the identical request; the answer kept is the answer
    to the prompt the user wrote, and no error text ever reached the model."""
    # No retries of the provider's own: each 5xx reaches the step's retries, which back off
    # (0.2 s doubling) past the outage.
    config(tmp_path, gateway.url, max_retries=0)
    pipeline(tmp_path, ASK.replace("retries: 3", "retries: 8"))
    since = len(upstream.inbound)
    llama.stop()
    proc = start_runner(tmp_path, "apply", "pipeline.yaml", "--json")
    back = threading.Timer(2.5, llama.start)
    back.start()
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        back.join()
        if proc.poll() is None:
            proc.kill()
    run = Run(proc.returncode, out, err)
    assert run.code == 0, run.stderr
    assert "HTTP 500" in run.stderr, run.stderr  # the gateway's 5xx was met, and said
    reached = _reached(upstream, since)
    assert b"Say something." in reached
    assert b"failed because" not in reached and b"InternalServerError" not in reached
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert ask["status"] == "completed" and ask["output"]["text"]


def test_a_step_timeout_through_the_gateway_is_maybe_executed_and_never_repaid(
    tmp_path: Path, gateway: Server, upstream: CountingProxy
) -> None:
    config(tmp_path, gateway.url)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    retries: 2
    timeout: 0.4
    with:
      prompt: "Write on."
      seed: 9
      max_tokens: 1900
      params: {logit_bias: {"2": -100}}
    check:
      - {expr: "true"}
""",
    )
    before = upstream.requests
    first = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert first.code != 0
    [ask] = executions(tmp_path, first.doc["run"]["id"], "ask")
    assert "step's timeout fired after 0.4s" in ask["error"], ask["error"]
    assert "--retry-uncertain" in ask["error"], ask["error"]
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code != 0
    time.sleep(0.5)  # the gateway may still be forwarding: count once it settled
    assert upstream.requests - before == 1  # one generation paid for, by one request


def test_stream_is_refused_before_the_gateway_is_asked(
    tmp_path: Path, gateway: Server, upstream: CountingProxy
) -> None:
    config(tmp_path, gateway.url)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    with:
      prompt: "Say something."
      params: {stream: true}
    check:
      - {expr: "output.text | length > 0"}
""",
    )
    before = upstream.requests
    checked = runner(tmp_path, "check", "pipeline.yaml")
    assert checked.code == 2 and "does not carry `params.stream`" in checked.stderr, checked
    applied = runner(tmp_path, "apply", "pipeline.yaml")
    assert applied.code == 2, applied.stderr
    assert upstream.requests == before


def test_the_gateways_reply_is_the_models_and_a_reapply_sends_nothing(
    tmp_path: Path, gateway: Server, upstream: CountingProxy
) -> None:
    config(tmp_path, gateway.url)
    pipeline(tmp_path, ASK)
    before = upstream.requests
    first = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert first.code == 0, first.stderr
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code == 0, again.stderr
    assert upstream.requests - before == 1
