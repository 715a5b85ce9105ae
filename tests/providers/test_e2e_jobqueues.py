"""Job-queue backends end to end: `runner apply` in a subprocess against loopback ComfyUI/A1111.

A ComfyUI job outlives the client: kill -9 the runner while its prompt renders, apply again, and
the journaled prompt_id is re-attached and its image fetched, never queued twice. A `timeout`
shorter than the render never makes a second submission (ComfyUI) or a second render (A1111).
Broken workflows and too many references are compile-time errors.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import runner_bin
from tests.providers.a1111_server import A1111Server
from tests.providers.comfy_server import ComfyUIServer

DATA = Path(__file__).parent.parent / "data" / "comfyui"

PIPELINE = """\
runner: 1
name: lighthouse
steps:
  gen:
    uses: image
    with: {prompt: "a lighthouse at dusk", n: 2, seed: 5, size: 64x48, concurrency: 2}
"""


def _comfy_config(root: Path, url: str, *, timeout: float, subs: str = "") -> None:
    shutil.copy(DATA / "sd15_api.json", root / "sd15_api.json")
    subs = subs or (
        'prompt = "6.inputs.text"\nseed = "3.inputs.seed"\n'
        'width = "5.inputs.width"\nheight = "5.inputs.height"\n'
    )
    text = textwrap.dedent(
        f"""\
        [general]
        default_provider = "comfyui"

        [providers.comfyui]
        base_url = "{url}"
        workflow = "sd15_api.json"
        timeout = {timeout}
        poll_interval = 0.02
        retry_base_delay = 0.05
        retry_max_delay = 0.1
        max_concurrency = 2

        [providers.comfyui.substitutions]
        """
    )
    (root / "runner.toml").write_text(text + subs, encoding="utf-8")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["NO_COLOR"] = "1"
    return env


def _apply(root: Path, *extra: str) -> dict[str, Any]:
    res = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json", "-q", *extra],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        doc: dict[str, Any] = json.loads(res.stdout)
    except ValueError:
        raise AssertionError(f"no JSON from apply: {res.stdout!r} {res.stderr!r}") from None
    return doc


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_stopping_runner_during_a_comfyui_job_then_apply_reattaches(
    tmp_path: Path, sig: signal.Signals
) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    with ComfyUIServer(render_s=1.5) as server:
        _comfy_config(tmp_path, server.url, timeout=60)
        proc = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml", "--json", "-q"],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Both prompts queued, the first one rendering: the runner is waiting on them.
            _wait(
                lambda: server.count("POST", "/prompt") == 2 and server.running is not None,
                "two prompts queued",
            )
            proc.send_signal(sig)
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode != 0
        assert server.total_executions() < 2 or server.running is not None  # still at work
        doc = _apply(tmp_path)  # while ComfyUI still renders what the killed run queued
        assert doc["exit_code"] == 0, doc
        assert server.count("POST", "/prompt") == 2, "a prompt was queued again"
        server.wait_idle()
        assert sorted(server.executions.values()) == [1, 1]
        assert server.count("GET", "/view") == 2
        show = subprocess.run(
            [*runner_bin(), "runs", "show", doc["run"]["id"], "--json"],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        calls = json.loads(show.stdout)["calls"]
        assert sorted(c["remote_id"] for c in calls) == sorted(server.executions)
        assert {c["outcome"] for c in calls} == {"completed"}
        again = _apply(tmp_path)
        assert again["exit_code"] == 0 and server.count("POST", "/prompt") == 2


def test_comfyui_timeout_shorter_than_the_render_never_submits_twice(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    with ComfyUIServer(render_s=0.6) as server:
        _comfy_config(tmp_path, server.url, timeout=0.1)
        doc = _apply(tmp_path)
        for _ in range(20):  # the retries may run out first: each apply re-attaches
            if doc["exit_code"] == 0:
                break
            doc = _apply(tmp_path)
        assert doc["exit_code"] == 0, doc
        server.wait_idle()
        assert server.count("POST", "/prompt") == 2
        assert sorted(server.executions.values()) == [1, 1]


def test_a1111_timeout_shorter_than_the_render_renders_each_image_once(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    with A1111Server(render_s=0.6) as server:
        (tmp_path / "runner.toml").write_text(
            textwrap.dedent(
                f"""\
                [general]
                default_provider = "a1111"

                [providers.a1111]
                base_url = "{server.url}"
                timeout = 0.2
                poll_interval = 0.05
                max_concurrency = 2
                """
            ),
            encoding="utf-8",
        )
        doc = _apply(tmp_path)
        server.wait_idle()
        assert doc["exit_code"] == 0, doc
        assert server.executions == 2 and server.max_parallel == 1
        assert server.count("POST", "/sdapi/v1/txt2img") == 2


def test_a_workflow_typo_is_a_compile_error_naming_the_nearest_input(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    _comfy_config(tmp_path, "http://127.0.0.1:9", timeout=1, subs='prompt = "6.inputs.txt"\n')
    res = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res
    assert "has no input 'txt'; did you mean 'text'?" in res.stderr
    assert "Traceback" not in res.stderr


def test_comfyui_progress_reaches_the_run_events(tmp_path: Path) -> None:
    """The /ws progress of each image is in `apply --events` as the step's log lines."""
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    with ComfyUIServer(render_s=0.3) as server:
        _comfy_config(tmp_path, server.url, timeout=30)
        doc = _apply(tmp_path, "--events", "events.jsonl")
        sockets = len(server.socket_requests)
    assert doc["exit_code"] == 0, doc
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    lines = [e["line"] for e in events if e["type"] == "Log" and e.get("step") == "gen"]
    for k in (1, 2):
        mine = [ln for ln in lines if ln.startswith(f"image #{k}: prompt ")]
        assert any(ln.endswith(": 20/20 steps (node 3)") for ln in mine), lines
        assert mine[-1].endswith(" done")
    assert sockets == 2 and server.count("POST", "/prompt") == 2


def test_two_references_for_a1111_are_a_compile_error(tmp_path: Path) -> None:
    """img2img makes one image per init image (a batch, not a blend): refused before a run."""
    (tmp_path / "a.png").write_bytes(b"\x89PNG not read at compile time")
    (tmp_path / "pipeline.yaml").write_text(
        PIPELINE.replace("concurrency: 2}", "concurrency: 2, references: [a.png, a.png]}"),
        encoding="utf-8",
    )
    (tmp_path / "runner.toml").write_text(
        '[general]\ndefault_provider = "a1111"\n\n[providers.a1111]\n'
        'base_url = "http://127.0.0.1:9"\n',
        encoding="utf-8",
    )
    for command in ("check", "apply"):
        res = subprocess.run(
            [*runner_bin(), command, "pipeline.yaml"],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        out = res.stdout + res.stderr
        assert res.returncode != 0 and "gives 2 reference images; A1111's img2img" in out, out
        assert "pipeline.yaml:" in out and "Traceback" not in out
