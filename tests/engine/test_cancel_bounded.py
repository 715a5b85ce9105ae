"""SIGTERM and SIGINT end a run within seconds whatever it waits on (issue 33, item 4).

Seen on a loaded machine: an llm for_each against a dead port printed "internal error in step
type 'llm': RuntimeError: Lock is not acquired" and then hung for minutes after SIGTERM. The
lock was the backend pool's (an asyncio.Condition waited on under wait_for): a second cancel
landing while wait_for ended its timed-out wait released the lock unheld, and the orphaned
wait then held it for good.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner.providers.pool import Backend, BackendPool
from tests.conftest import Project, runner_bin

# -- the lock's error path, in the pool itself ----------------------------------------------------


async def _cancel_storm(seed: int, found: list[str]) -> None:
    """Calls cycling through a dead backend (refused, down, probed again), each cancelled twice
    at a random moment, as a run's end cancels an element from two sides."""
    pool = BackendPool([Backend("http://127.0.0.1:9", 2)], probe_interval=0.002)

    async def call() -> None:
        while True:
            async with pool.lease() as chosen:
                await asyncio.sleep(0)
                pool.refused(chosen)

    rng = random.Random(seed)
    tasks = [asyncio.create_task(call()) for _ in range(16)]
    await asyncio.sleep(0.05)
    for t in tasks:
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        t.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
    done, pending = await asyncio.wait(tasks, timeout=2)
    found.extend(repr(t.exception()) for t in done if not t.cancelled())
    found.extend(f"seed {seed}: a call still waiting after its cancel" for _ in pending)
    found.extend(f"seed {seed}: a waiter left behind" for _ in getattr(pool, "_waiters", ()))


def test_cancelled_pool_waits_neither_raise_nor_hang() -> None:
    found: list[str] = []

    def storms() -> None:
        for seed in range(20):
            try:
                asyncio.run(_cancel_storm(seed, found))
            except Exception as exc:  # a failure, not a silently ended thread
                found.append(repr(exc))

    # In a thread: the old pool hung asyncio.run's own end, which this test must outlive.
    worker = threading.Thread(target=storms, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), f"hung; seen so far: {found[:3]}"
    assert found == []


# -- a real apply, signalled under load ----------------------------------------------------------


@contextmanager
def _cpu_load(seconds: float) -> Iterator[None]:
    """Both cores busy (a run on a quiet machine never showed the hang)."""
    spin = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@contextmanager
def _dead_port() -> Iterator[int]:
    """A loopback port nothing listens on: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield port


@contextmanager
def _silent_port() -> Iterator[int]:
    """A loopback port that takes connections into its backlog and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(512)
        yield s.getsockname()[1]


FOR_EACH = """\
runner: 1
name: dead-end
params:
  items: {type: array, default: %s}
steps:
  many:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 8
    with: {prompt: "say ${{ item }}"}
    check: ["${{ output.text | length > 0 }}"]
"""


def _project(project: Project, port: int) -> None:
    project.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "openai"

        [providers.openai]
        base_url = "http://127.0.0.1:{port}/v1"
        model = "test-chat"
        max_concurrency = 8
        """,
    )
    project.write("pipeline.yaml", FOR_EACH % list(range(200)))


def _run_status(project: Project) -> list[tuple[str, str]]:
    res = project.cli("runs", "list", "--state", ".runner", "--json")
    return [(r["status"], r["id"]) for r in res.json["runs"]] if res.exit_code == 0 else []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "port_of"),
    [(signal.SIGTERM, _dead_port), (signal.SIGINT, _dead_port), (signal.SIGTERM, _silent_port)],
    ids=["sigterm-refused", "sigint-refused", "sigterm-silent"],
)
def test_a_signal_ends_a_loaded_run_within_seconds(project: Project, sig: int, port_of) -> None:  # type: ignore[no-untyped-def]
    with port_of() as port, _cpu_load(40):
        _project(project, port)
        proc = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml"],
            cwd=project.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not any(s == "running" for s, _ in _run_status(project)):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.2)
            time.sleep(4)  # calls refused, backed off, waiting on the pool: where it hung
            sent = time.monotonic()
            proc.send_signal(sig)
            try:
                _, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still running 15 s after {signal.Signals(sig).name}")
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert took < 6.0, f"{signal.Signals(sig).name} to exit: {took:.1f} s"
    assert proc.returncode == 130, err
    assert "Lock is not acquired" not in err
    assert [s for s, _ in _run_status(project)] == ["cancelled"]


# -- what the watchdog does, and does not, end ---------------------------------------------------

SCRIPT = """\
import asyncio, os, signal, sys, threading, time
from pathlib import Path
from runner.engine.run.apply import apply_file
from runner.steps.base import StepResult, StepType
from runner.steps.registry import default_registry

class Stuck(StepType):
    name = "stuck_in_a_thread_test"
    async def run(self, ctx, args):
        await asyncio.to_thread(time.sleep, 600)  # a call that never returns: its thread stays
        return StepResult(output={})

default_registry().register(Stuck())
Path("p.yaml").write_text(
    "runner: 1\\nname: s\\nsteps:\\n  s: {uses: %s}\\n"
)
threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    apply_file(Path("p.yaml"))
except KeyboardInterrupt:
    print("cancelled", flush=True)
time.sleep(7)  # a program that goes on after the cancel
print("alive", flush=True)
"""


def _script(tmp_path: Path, uses: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT % uses],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return res, time.monotonic() - began


def test_a_thread_that_never_returns_does_not_hold_the_exit(project: Project) -> None:
    res, took = _script(project.root, "stuck_in_a_thread_test")
    assert res.returncode == 130, (res.stdout, res.stderr)
    assert "still running 5 s after the signal" in res.stderr
    assert "alive" not in res.stdout and took < 15, took
    assert [s for s, _ in _run_status(project)] == ["cancelled"]


def test_a_program_that_goes_on_after_a_cancel_is_not_ended(project: Project) -> None:
    res, _ = _script(project.root, "shell, with: {run: 'sleep 30'}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["cancelled", "alive"]
    assert [s for s, _ in _run_status(project)] == ["cancelled"]
