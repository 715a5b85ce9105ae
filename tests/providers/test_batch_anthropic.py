"""Batch mode against Anthropic's Message Batches (the loopback double): a for_each sent as one
batch, collected by a later apply; runner killed while the service made the batch but before
its reply came back: the next apply finds that batch (by when it was made and its size: the API
keeps no metadata), never makes a second, and sends no element twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
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


class _Apply:
    """``runner apply`` in the background, to be killed with SIGKILL at a chosen moment."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml"], cwd=root, env=_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        assert self.proc.poll() is None, "runner ended before it could be killed"
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _slow(root: Path, port: int = 0) -> AnthropicBatchServer:
    """A double holding each creation 1.5 s, 0.025 s a request, each results download 1.5 s:
    each long enough for runner to be killed inside it (the test kills once it sees the
    request), 200 requests 5 s in progress; runner's looks at a batch back off (1, 2, 4 s...),
    so longer ones only make each apply wait longer."""
    return AnthropicBatchServer(
        api_key=SECRET, root=root, port=port,
        create_hold_s=1.5, per_request_s=0.025, results_delay_s=1.5,
    )  # fmt: skip


def test_kill_9_in_creation_while_in_progress_and_in_the_results_download_one_batch(
    tmp_path: Path,
) -> None:
    """Killed while the service holds the creation (it makes the batch after runner died), while
    runner polls the batch in progress, and while it downloads the results (the double itself
    restarted in between): the next apply finds the one batch each time, and no request runs
    twice."""
    n = 200
    double = tmp_path / "double"
    server = _slow(double)
    with server:
        _project(tmp_path, server.url, n, extra="batch_wait = 60")
        # 1. killed while the service holds the creation: no batch yet when runner dies
        run = _Apply(tmp_path)
        _until(lambda: server.count("POST", "/v1/messages/batches") == 1, "the creation")
        assert server.batches() == []
        run.kill()
        _until(lambda: len(server.batches()) == 1, "the batch made after runner died")
        [made] = server.batches()
        looks = f"/v1/messages/batches/{made['id']}"
        # 2. killed while it polls the batch, in progress (every request still processing)
        run = _Apply(tmp_path)
        _until(lambda: server.count("GET", looks) > 0, "a look at the batch")
        run.kill()
        [made] = server.batches()
        assert made["processing_status"] == "in_progress"
        assert made["request_counts"]["processing"] == n
        port = int(server.url.rsplit(":", 1)[1])
    # 3. the service restarted (same root and port): the batch goes on where it was
    server = _slow(double, port)
    with server:
        assert [b["id"] for b in server.batches()] == [made["id"]]
        # 4. killed while it downloads the results of the ended batch
        run = _Apply(tmp_path)
        _until(lambda: server.count("GET", f"{looks}/results") > 0, "the results download")
        run.kill()
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.batches()) == 1  # found again each time, never made twice
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}  # 0 requests run twice
        assert server.count("POST", "/v1/messages") == 0
    assert set(_outputs(tmp_path).values()) == {f"echo: word {i}" for i in range(n)}
    assert _run_status(tmp_path) == ["interrupted"] * 3 + ["completed"]


def test_an_expired_message_batch_sends_the_requests_it_never_ran_again(tmp_path: Path) -> None:
    """The first batch is not done within its window (1 s standing for 24 h): it ends, what it
    ran succeeded and the rest is ``expired``; runner takes the answers and sends the expired
    requests in a second batch, within the same apply."""
    n = 60
    with AnthropicBatchServer(
        api_key=SECRET, per_request_s=0.03, expire_s=1.0, expiring=1
    ) as server:
        assert isinstance(server, AnthropicBatchServer)
        _project(tmp_path, server.url, n, extra="batch_wait = 30")
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        first, second = sorted(server.batches(), key=lambda b: str(b["created_at"]))
        counts = first["request_counts"]
        assert first["processing_status"] == "ended" and 0 < counts["expired"] < n
        assert counts["succeeded"] + counts["expired"] == n and counts["processing"] == 0
        assert first["ended_at"] == first["expires_at"]  # it ended when its window closed
        assert second["request_counts"]["succeeded"] == counts["expired"]
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}
        assert server.count("POST", "/v1/messages") == 0
    assert set(_outputs(tmp_path).values()) == {f"echo: word {i}" for i in range(n)}
    assert _run_status(tmp_path) == ["completed"]


def test_an_errored_request_follows_the_steps_retries_in_a_follow_up_batch(
    tmp_path: Path,
) -> None:
    """A request the batch answers ``errored`` with the service's error (529 overloaded_error,
    {type: error, error: {type, message}}) is transient: the step's retry sends it in a second
    batch, and only it; the others are answered by the first."""
    with AnthropicBatchServer(api_key=SECRET) as server:
        assert isinstance(server, AnthropicBatchServer)
        _project(tmp_path, server.url, 3, extra="batch_wait = 30")
        pipeline = tmp_path / "pipeline.yaml"
        text = pipeline.read_text(encoding="utf-8").replace(
            "[0, 1, 2]", '["a", "b", "[[OVERLOAD]]"]'
        )
        pipeline.write_text(
            text.replace("    with:", "    retries: 1\n    with:"), encoding="utf-8"
        )
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        first, second = sorted(server.batches(), key=lambda b: str(b["created_at"]))
        assert first["request_counts"]["errored"] == 1 and first["request_counts"]["succeeded"] == 2
        assert second["request_counts"] == {
            "processing": 0, "succeeded": 1, "errored": 0, "canceled": 0, "expired": 0
        }  # fmt: skip
        assert server.billed == 3  # the overloaded request was not billed
    db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
    try:
        [error] = [
            r[0] for r in db.execute("SELECT error FROM batch_items WHERE error IS NOT NULL")
        ]
    finally:
        db.close()
    assert error == "529|1|overloaded_error: Overloaded"  # transient, in the service's words
    assert set(_outputs(tmp_path).values()) == {
        "echo: word a",
        "echo: word b",
        "echo: word [[OVERLOAD]]",
    }


def test_an_errored_request_without_retries_fails_its_element(tmp_path: Path) -> None:
    """With no retry left, an ``errored`` request fails its element with the service's words:
    it is not sent again as an expired request would be."""
    with AnthropicBatchServer(api_key=SECRET) as server:
        assert isinstance(server, AnthropicBatchServer)
        _project(tmp_path, server.url, 3, extra="batch_wait = 30")
        pipeline = tmp_path / "pipeline.yaml"
        text = pipeline.read_text(encoding="utf-8")
        pipeline.write_text(text.replace("[0, 1, 2]", '["a", "b", "[[OVERLOAD]]"]'), "utf-8")
        done = _apply(tmp_path)
        assert done.returncode != 0
        assert "overloaded_error: Overloaded" in done.stdout + done.stderr
        assert len(server.batches()) == 1  # not sent again
        assert server.billed == 2
