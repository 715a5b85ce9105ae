"""Under ``--executor dask`` a ``repeat_safe: false`` body is never started twice, even when a
worker is killed mid-run (issue 40: 18-32 of 120 bodies ran again in 3 runs of 4).

Dask gives a lost worker's tasks to another worker, and the coordinator may retry a body whose
outcome never came back. A body of a step not safe to repeat is journaled as started before it
runs; one that began and was never seen to end is refused, on Dask's rerun and on runner's own
retry alike, and said as not finished (to be run again only when the user says so). Real
`runner apply` processes on a real 2-worker LocalCluster; a real worker process is killed.
"""

from __future__ import annotations

import collections
import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from runner.surfaces.testing.daskcluster import runner_tracebacks
from tests.engine.test_executor_dask import _workers_of, dask_apply_command, dask_env

pytest.importorskip("distributed")

N = 120


def _project(root: Path, retries: int) -> None:
    root.mkdir(parents=True)
    (root / "sent").mkdir()
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: fan\nsteps:\n  send:\n    uses: shell\n    repeat_safe: false\n"
        f"    retries: {retries}\n"
        f"    for_each: {list(range(N))}\n"
        "    with:\n"
        '      run: "echo ${{ item }} >> sent/${{ item }}.log && sleep 0.1"\n'
        '      outputs: ["sent/${{ item }}.log"]\n',
        encoding="utf-8",
    )


def _sent(root: Path) -> collections.Counter[str]:
    """How often each element's body started, from the log each appends to (its output)."""
    return collections.Counter(
        line for log in (root / "sent").glob("*.log") for line in log.read_text().split()
    )


def _apply(root: Path, *extra: str) -> dict[str, Any]:
    res = subprocess.run(
        dask_apply_command(*extra),
        cwd=root,
        env=dask_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert runner_tracebacks(res.stderr) == [], res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _refused(root: Path) -> set[int]:
    """The elements whose last execution failed (refused: began and never seen to end)."""
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute(
            "SELECT element, status, error FROM executions WHERE step_id='send' ORDER BY id"
        ).fetchall()
    finally:
        db.close()
    last = {element: (status, error) for element, status, error in rows}
    refused = {e for e, (status, _) in last.items() if status == "failed"}
    for e in refused:
        assert "never finished" in last[e][1] and "--force send" in last[e][1], last[e]
    return refused


@pytest.mark.slow
@pytest.mark.parametrize("retries", [0, 2], ids=["late", "late-with-retries"])
def test_a_body_not_safe_to_repeat_never_starts_twice_when_a_worker_is_killed(
    tmp_path: Path, retries: int
) -> None:
    """Killed once most bodies' outcomes are back, their results still on the worker: Dask
    made them anew and 40 of 120 started a second time (a kill early, the lost batch run again
    elsewhere: tests/steps/test_repeat_safe.py). With retries: runner's own retry of a body
    whose outcome was lost."""
    kill_at = 2 * N // 3
    root = tmp_path / "p"
    _project(root, retries)
    proc = subprocess.Popen(
        dask_apply_command(),
        cwd=root,
        env=dask_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while sum(_sent(root).values()) < kill_at:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the bodies never started"
            time.sleep(0.01)
        workers = _workers_of(proc.pid)
        assert workers, "no Dask worker process found under the apply"
        max(workers, key=lambda p: p.create_time()).send_signal(signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert runner_tracebacks(stderr) == [], stderr
    sent = _sent(root)
    twice = sorted(int(k) for k, n in sent.items() if n > 1)
    assert twice == [], f"{len(twice)} bodies started twice: {twice}"
    refused = _refused(root)
    # each body ran once, or began on the lost worker and is said as maybe executed
    assert set(range(N)) == {int(k) for k in sent}, "a body never started"
    assert json.loads(stdout)["exit_code"] == (0 if not refused else 6), stdout
    if not refused:
        return
    # the next apply does not start them again either, until the user says so
    again = _apply(root)
    assert _sent(root) == sent, "the next apply started a lost body again"
    assert again["exit_code"] != 0 and "never finished" in json.dumps(again)
    asked = _apply(root, "--retry-uncertain")
    assert asked["exit_code"] == 0, asked
    after = _sent(root)
    assert {int(k) for k, n in after.items() if n > 1} == refused  # those, once more each
    assert all(n <= 2 for n in after.values())
    # every mark and dispatch ticket goes once its outcome is back
    assert list((root / ".runner" / "started").iterdir()) == []
