"""`runner watch` and the run page on a run waiting for a provider batch (issue 41): watch looks
at the batch again on its own, with backoff, saying how far it is ("batch B: 12 of 40 done
(in_progress), expires in 24 h"), and collects it once it has ended, as apply does; the run page
shows each batch's id, how many of its requests are done and when it expires. runner runs in a
subprocess against the loopback OpenAI batch double."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

from runner.surfaces.web.app import create_app
from tests.conftest import runner_bin
from tests.providers.openai_batch_server import OpenAIBatchServer
from tests.providers.test_batch_mode import (
    AWAITING_BATCH,
    SECRET,
    _apply,
    _env,
    _outputs,
    _project,
    _run_ids,
    _texts,
)
from tests.webdriving import TOKEN

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

N = 40


def _lines_until(proc: subprocess.Popen[str], done: str, timeout: float) -> list[str]:
    """stdout lines of ``proc`` up to the first holding ``done``."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.append(line)
        if done in line:
            return seen
    raise AssertionError(f"no line with {done!r} within {timeout} s:\n" + "\n".join(seen))


def test_watch_looks_at_the_batch_again_and_collects_it(tmp_path: Path) -> None:
    # 40 requests at 0.06 s each: the batch runs ~2.7 s, over several of watch's looks (at 0,
    # 1 and 3 s: it is done by the third; the next would be 4 s later)
    with OpenAIBatchServer(
        tmp_path / "double", api_key=SECRET, validate_s=0.3, per_request_s=0.06
    ) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, N)
        proc = subprocess.Popen(
            [*runner_bin(), "watch", "pipeline.yaml"],
            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        try:
            lines = _lines_until(proc, "[completed]", timeout=90)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)
            assert proc.stdout is not None
            proc.stdout.close()
        text = "\n".join(lines)
        assert "cycle 1: (start) -> " in text and "[awaiting_batch]" in text
        assert "; its batch again in 1 s" in text and "; its batch again in 2 s" in text
        progress = re.compile(rf"waiting ask: batch rb-\w+: (\d+) of {N} done \((\w+)\)")
        looks = [m.groups() for m in map(progress.search, lines) if m]
        assert any(status == "in_progress" for _done, status in looks), text
        assert all(", expires in 24 h" in line for line in lines if progress.search(line))
        last = lines[-1]
        assert re.match(r"cycle \d+: \(batch\) -> ran 40 elements.*\[completed\]", last), last
        assert len(server.batches()) == 1  # looked at, never made again
        answered = server.answered()
        assert len(answered) == N and set(answered.values()) == {1}
    assert set(_outputs(tmp_path).values()) == _texts(N)


def test_the_run_page_shows_how_far_its_batch_is(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET, validate_s=120.0) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, N)
        first = _apply(tmp_path)
        assert first.returncode == AWAITING_BATCH, first.stdout + first.stderr
        [remote] = server.batches()
    [run_id] = _run_ids(tmp_path)
    app = create_app(tmp_path / ".runner", TOKEN, extra_hosts=["testserver"], cwd=tmp_path)
    with TestClient(app) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        page = client.get(f"/runs/{run_id}").text
    assert 'id="run-batches"' in page
    found = re.search(
        rf"batch (rb-\w+): 0 of {N} done \(validating\), expires in 24 h"
        rf' <small class="hint">provider id <code>{remote["id"]}</code></small>',
        page,
    )
    assert found is not None, page[page.find("run-batches") - 200 :][:800]
