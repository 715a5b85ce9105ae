"""The coordinator of a dask run SIGKILLed mid-run, then applied again: real processes.

The journal lives with the coordinator, so a re-apply resumes as it does with the local
executor: an element the journal holds completed is answered from the cache (its body does not
run again); only those in flight or not started run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from runner.surfaces.testing.daskcluster import runner_tracebacks
from tests.engine.test_executor_dask import assert_verify_clean, dask_apply_command, dask_env

pytest.importorskip("distributed")

N = 120


def _project(root: Path) -> None:
    """A for_each of shell steps, each appending its index to its own log (ran/eN.log, an
    output) when its body runs."""
    root.mkdir(parents=True)
    (root / "out").mkdir()
    (root / "ran").mkdir()
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: resume\nsteps:\n  each:\n    uses: shell\n"
        f"    for_each: {list(range(N))}\n"
        "    with:\n"
        '      run: "echo ${{ item }} >> ran/e${{ item }}.log && sleep 0.1 '
        '&& echo ${{ item }} > out/e${{ item }}.txt"\n'
        '      outputs: ["out/e${{ item }}.txt", "ran/e${{ item }}.log"]\n',
        encoding="utf-8",
    )


def _rows(root: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(root / ".runner" / "journal.db", timeout=30)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def _completed(root: Path) -> set[int]:
    if not (root / ".runner" / "journal.db").exists():
        return set()
    try:
        rows = _rows(
            root, "SELECT element FROM executions WHERE step_id='each' AND status='completed'"
        )
    except sqlite3.OperationalError:  # the schema is not there yet
        return set()
    return {int(e) for (e,) in rows}


def _ran(root: Path) -> Counter[int]:
    """How often each element's body ran, from the logs the bodies append to."""
    logs = (root / "ran").glob("*.log")
    return Counter(int(x) for log in logs for x in log.read_text(encoding="utf-8").split())


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the apply and every process it started (the LocalCluster's nannies, workers)."""
    family = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for child in family:  # one that left the group (none should): killed by its own id
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(family, timeout=30)


def test_a_coordinator_killed_mid_run_resumes_without_running_completed_elements_again(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    _project(root)
    first = subprocess.Popen(
        dask_apply_command(),
        cwd=root,
        env=dask_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: the kill takes the cluster with it
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_completed(root)) < 20:
            assert first.poll() is None, "the first apply ended before it was killed"
            time.sleep(0.05)
    finally:
        _kill_group(first)
    completed = _completed(root)
    assert 20 <= len(completed) < N, "the kill came too late to be mid-run"
    ran_before = _ran(root)
    assert all(ran_before[e] == 1 for e in completed)
    runs = _rows(root, "SELECT id, status FROM runs")
    assert [status for _id, status in runs] == ["running"]  # killed: nothing marked it ended
    killed_run = runs[0][0]

    again = subprocess.run(
        dask_apply_command(), cwd=root, env=dask_env(), capture_output=True, text=True, timeout=600
    )
    assert runner_tracebacks(again.stderr) == [], again.stderr
    doc = json.loads(again.stdout)
    assert doc["exit_code"] == again.returncode == 0, again.stderr

    # The log: no body of an element completed before the kill ran again; every element ran.
    ran_after = _ran(root)
    assert {e: ran_after[e] for e in completed} == {e: 1 for e in completed}
    assert set(ran_after) == set(range(N))
    # The journal: the re-apply answered those elements from the cache, ran only the others.
    second = doc["run"]["id"]
    assert second != killed_run
    statuses = dict(
        _rows(
            root,
            "SELECT element, status FROM executions WHERE run_id=? AND step_id='each'",
            (second,),
        )
    )
    assert {e for e, s in statuses.items() if s == "cached"} == completed
    assert {e for e, s in statuses.items() if s == "completed"} == set(range(N)) - completed
    counts = _rows(
        root,
        "SELECT element, COUNT(*) FROM executions WHERE step_id='each' AND status='completed' "
        "GROUP BY element",
    )
    assert len(counts) == N and all(n == 1 for _e, n in counts)
    assert sorted(int(p.read_text()) for p in (root / "out").iterdir()) == list(range(N))
    assert_verify_clean(root)
