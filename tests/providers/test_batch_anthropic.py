"""Batch mode against Anthropic's Message Batches (the loopback double): a for_each sent as one
batch, collected by a later apply; runner killed while the service made the batch but before
its reply came back: the next apply finds that batch (by when it was made and its size: the API
keeps no metadata), never makes a second, and sends no element twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

from tests.conftest import runner_bin
from tests.providers.anthropic_batch_server import AnthropicBatchServer
from tests.providers.test_batch_mode import AWAITING_BATCH, _outputs, _run_status, _until

SECRET = "sk-ant-batch-Zq7xW3vK9pL2mN8rT4yU6hJ1"


def _project(root: Path, url: str, n: int, extra: str = "") -> None:
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "anthropic"

            [providers.anthropic]
            base_url = "{url}/v1"
            model = "claude-test"
            api_key_env = "TEST_ANTHROPIC_KEY"
            timeout = 10
            {extra}
            """
        ),
        encoding="utf-8",
    )
    items = json.dumps(list(range(n)))
    (root / "pipeline.yaml").write_text(
        textwrap.dedent(
            f"""\
            runner: 1
            name: batched
            steps:
              ask:
                uses: llm
                for_each: {items}
                with:
                  prompt: "word ${{{{ item }}}}"
                  batch: true
                check:
                  - "${{{{ output.text.startswith('echo') }}}}"
            """
        ),
        encoding="utf-8",
    )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", TEST_ANTHROPIC_KEY=SECRET)
    return env


def _apply(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml"],
        cwd=root, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_for_each_goes_as_one_message_batch(tmp_path: Path) -> None:
    n = 300
    with AnthropicBatchServer(api_key=SECRET, per_request_s=0.002) as server:
        assert isinstance(server, AnthropicBatchServer)
        _project(tmp_path, server.url, n)
        first = _apply(tmp_path)
        assert first.returncode == AWAITING_BATCH, first.stdout + first.stderr
        assert len(server.batches()) == 1
        time.sleep(n * 0.002)
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert set(_outputs(tmp_path).values()) == {f"echo: word {i}" for i in range(n)}
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}
        assert server.count("POST", "/v1/messages") == 0
        assert _run_status(tmp_path) == ["completed"]


def test_kill_9_before_the_batch_reply_finds_the_batch_it_made(tmp_path: Path) -> None:
    n = 200
    with AnthropicBatchServer(api_key=SECRET, create_delay_s=5.0, per_request_s=0.01) as server:
        assert isinstance(server, AnthropicBatchServer)
        _project(tmp_path, server.url, n, extra="batch_wait = 60")
        proc = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml"], cwd=tmp_path, env=_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        _until(lambda: len(server.batches()) == 1, "the batch's creation")
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.batches()) == 1  # found again, not made twice
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}
        assert set(_outputs(tmp_path).values()) == {f"echo: word {i}" for i in range(n)}
