"""A step may declare itself not safe to repeat (issue 33, item 8).

On Dask a killed worker's batch runs again elsewhere, and after a kill -9 the next apply runs
what was unfinished: 14-72 of 400 shell bodies ran twice. `repeat_safe: false` bodies are
journaled as started before they run and marked on the machine that runs them; one found
started but unfinished fails with a message instead of running again, until --force.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import runner_bin

ONE = """\
runner: 1
name: once
steps:
  send:
    uses: shell
    repeat_safe: false
    with: {run: "echo sent >> sent.log; sleep 3", outputs: [sent.log]}
  after: {uses: shell, needs: [send], with: {run: "echo after"}}
"""


def _apply(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "p.yaml", "--json", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wait_for(path: Path, lines: int, proc: subprocess.Popen[str], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not (path.exists() and len(path.read_text().splitlines()) >= lines):
        assert proc.poll() is None, "the apply ended before the body began"
        assert time.monotonic() < deadline, "the bodies never started"
        time.sleep(0.05)


def test_a_body_killed_mid_run_is_not_run_again_without_force(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(ONE)
    first = subprocess.Popen(
        [*runner_bin(), "apply", "p.yaml"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(tmp_path / "sent.log", 1, first)
        os.killpg(first.pid, signal.SIGKILL)  # the apply and its shell: nothing sees the end
    finally:
        first.wait()
    again = _apply(tmp_path)
    assert again.returncode != 0, again.stderr
    send = {s["id"]: s for s in json.loads(again.stdout)["steps"]}["send"]
    assert send["status"] == "failed"
    assert "never finished" in send["reason"] and "--force send" in send["reason"], send
    assert (tmp_path / "sent.log").read_text() == "sent\n"  # not sent twice
    forced = _apply(tmp_path, "--force", "send")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "sent.log").read_text() == "sent\nsent\n"
    assert _apply(tmp_path).returncode == 0  # done: cached, nothing refused any more
    assert not any((tmp_path / ".runner" / "started").iterdir())


def test_a_repeat_safe_step_that_ends_normally_runs_again_when_its_key_changes(
    tmp_path: Path,
) -> None:
    (tmp_path / "p.yaml").write_text(ONE.replace("sleep 3", "sleep 0"))
    assert _apply(tmp_path).returncode == 0
    assert _apply(tmp_path, "--force", "send").returncode == 0  # no mark left behind to refuse
    assert (tmp_path / "sent.log").read_text() == "sent\nsent\n"


EACH = """\
runner: 1
name: each
steps:
  send:
    uses: shell
    repeat_safe: false
    for_each: {items}
    with: {{run: "echo ${{{{ item }}}} >> sent.log; sleep 2", outputs: [sent.log]}}
"""


def _cmdline(pid: int | str) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _parent(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _worker_running_a_body(root: Path) -> int | None:
    """The pid of a Dask worker process whose shell body is running now."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = _cmdline(entry.name)
            cwd = os.readlink(entry / "cwd")
            if cmd.startswith("/bin/sh -c echo") and "sent.log" in cmd and cwd == str(root):
                # its parent is the worker that started it, or the worker's sandbox spawner
                # (its program _spawnc_exec, or _spawner.py's interpreter, in its bwrap): the
                # worker is the first ancestor that is neither
                parent = _parent(entry.name)
                while "_spawn" in (up := _cmdline(parent)) or "bwrap" in up.split(" ")[0]:
                    parent = _parent(parent)
                return parent
        except (OSError, IndexError, ValueError):
            continue
    return None


@pytest.mark.slow
def test_a_lost_dask_worker_does_not_run_a_body_twice(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    (tmp_path / "p.yaml").write_text(EACH.format(items=list(range(12))))
    proc = subprocess.Popen(
        [*runner_bin(), "apply", "p.yaml", "--json", "--executor", "dask", "--workers", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(tmp_path / "sent.log", 1, proc, limit=90)
        worker = _worker_running_a_body(tmp_path)
        assert worker is not None and worker != proc.pid
        os.kill(worker, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    sent = (tmp_path / "sent.log").read_text().split()
    assert len(sent) == len(set(sent)), f"bodies ran twice: {sorted(sent)}"
    step = json.loads(out)["steps"][0]
    assert sorted(sent, key=int) == [str(i) for i in range(12)], "a body ran twice, or none"
    # Dask ran the lost worker's batch again: the body that had begun there refused, the
    # others of the batch (never begun) ran
    assert step["elements"].get("failed", 0) >= 1, (step, err[-2000:])
    assert "never finished" in step["reason"] and "--force send" in step["reason"], step


TIMED_OUT = """\
runner: 1
name: once
steps:
  send:
    uses: shell
    repeat_safe: false
    timeout: 1
    retries: 2
    with: {run: "echo sent >> sent.log; sleep 5", outputs: [sent.log]}
"""


def test_a_body_that_timed_out_is_not_retried_blindly(tmp_path: Path) -> None:
    """A timeout says nothing of whether the body took effect (issue 40): the retry a step's
    `retries` allows is refused, as a lost worker's rerun is, until the user says so."""
    (tmp_path / "p.yaml").write_text(TIMED_OUT)
    first = _apply(tmp_path)
    assert first.returncode != 0, first.stderr
    send = {s["id"]: s for s in json.loads(first.stdout)["steps"]}["send"]
    assert "never finished" in send["reason"] and "--force send" in send["reason"], send
    assert (tmp_path / "sent.log").read_text() == "sent\n"  # attempted once, not three times
    assert _apply(tmp_path).returncode != 0
    assert (tmp_path / "sent.log").read_text() == "sent\n"
