"""Step bodies on a Dask cluster (`runner apply --executor dask`), real processes throughout.

Same keys, outputs and exit codes as the local executor; a worker SIGKILLed mid-run costs
nothing but time; worker resources place steps only where declared.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from runner.surfaces.testing.daskcluster import command_line_cluster, runner_tracebacks
from tests.conftest import REPO

pytest.importorskip("distributed")


def dask_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["NO_COLOR"] = "1"
    return env


def dask_apply_command(*extra: str) -> list[str]:
    """``runner apply pipeline.yaml`` on a 2-worker LocalCluster, its document on stdout."""
    return [
        *(sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", "-q"),
        *("--state", ".runner", "--executor", "dask", "--workers", "2", *extra),
    ]


def assert_verify_clean(root: Path) -> None:
    """``runner verify`` finds every recorded output as it was made."""
    verify = subprocess.run(
        [sys.executable, "-m", "runner", "verify", "--state", ".runner", "--json"],
        cwd=root,
        env=dask_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout


def _apply(root: Path, file: str, *extra: str, timeout: float = 300) -> dict[str, Any]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "apply",
            file,
            "--json",
            "-q",
            "--state",
            ".runner",
            *extra,
        ],
        cwd=root,
        env=dask_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert runner_tracebacks(res.stderr) == [], res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    assert doc["exit_code"] == res.returncode
    return doc


def _keys(root: Path) -> dict[tuple[str, int], tuple[str, str]]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute(
            "SELECT step_id, element, key, output FROM executions WHERE status='completed'"
        ).fetchall()
    finally:
        db.close()
    return {(s, e): (k, o) for s, e, k, o in rows}


def _files(root: Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def _scene_project(root: Path) -> None:
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "scene-detail.yaml", root / "pipelines")
    for d in ("cards", "prompts/scene_detail", "examples/scene-detail"):
        shutil.copytree(REPO / d, root / d)


def _thumb_project(root: Path) -> None:
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")


@pytest.mark.parametrize(
    ("make", "file"),
    [(_scene_project, "pipelines/scene-detail.yaml"), (_thumb_project, "pipelines/thumbnail.yaml")],
)
def test_shipped_pipelines_give_the_same_keys_outputs_and_exit_codes(
    tmp_path: Path, make: Any, file: str
) -> None:
    local, dask = tmp_path / "local", tmp_path / "dask"
    make(local)
    make(dask)
    a = _apply(local, file)
    b = _apply(dask, file, "--executor", "dask", "--workers", "2")
    assert a["exit_code"] == b["exit_code"] == 0
    assert [(s["id"], s["status"], s["key"]) for s in a["steps"]] == [
        (s["id"], s["status"], s["key"]) for s in b["steps"]
    ]
    assert _keys(local).keys() == _keys(dask).keys()
    assert sorted(v[0] for v in _keys(local).values()) == sorted(v[0] for v in _keys(dask).values())
    objects_a = _files(local, ".runner/objects")
    assert objects_a == _files(dask, ".runner/objects")


def _fanout(root: Path, n: int, sleep: float) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: fan\nsteps:\n  each:\n    uses: shell\n"
        f"    for_each: {list(range(n))}\n"
        "    with:\n"
        f'      run: "sleep {sleep} && echo ${{{{ item }}}} > out/e${{{{ item }}}}.txt"\n'
        '      outputs: ["out/e${{ item }}.txt"]\n',
        encoding="utf-8",
    )


def _workers_of(pid: int) -> list[psutil.Process]:
    """The Dask worker processes under an apply (nannies' children, started by multiprocessing's
    spawn_main), not multiprocessing's resource tracker, which starts in the same clock tick
    and so can look as new as a worker."""
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            out.append(child)
    return out


def test_a_worker_killed_mid_run_costs_only_time(tmp_path: Path) -> None:
    root = tmp_path / "p"
    _fanout(root, 200, 0.05)
    proc = subprocess.Popen(
        dask_apply_command(),
        cwd=root,
        env=dask_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out_dir = root / "out"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if out_dir.is_dir() and len(list(out_dir.iterdir())) >= 40:
            break
        time.sleep(0.05)
    workers = _workers_of(proc.pid)
    assert workers, "no Dask worker process found under the apply"
    victim = max(workers, key=lambda p: p.create_time())  # a worker, not a nanny or the tracker
    # runner unsets the nanny's MALLOC_TRIM_THRESHOLD_ (executors.local_cluster: it slows
    # image bodies); the rest of the nanny's environment is left as Dask sets it.
    environ = victim.environ()
    assert "MALLOC_TRIM_THRESHOLD_" not in environ and environ.get(
        "OMP_NUM_THREADS"
    ) == os.environ.get("OMP_NUM_THREADS", "1")
    victim.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    doc = json.loads(stdout)
    assert doc["exit_code"] == 0, stderr
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute(
            "SELECT element, COUNT(*) FROM executions WHERE step_id='each' AND status='completed' "
            "GROUP BY element"
        ).fetchall()
    finally:
        db.close()
    assert len(rows) == 200 and all(count == 1 for _e, count in rows)
    assert sorted(int(p.read_text()) for p in out_dir.iterdir()) == list(range(200))
    assert_verify_clean(root)


def test_steps_asking_for_a_gpu_run_only_where_one_is_declared(tmp_path: Path) -> None:
    workers = [["--nthreads", "2", "--name", "gpu", "--resources", "GPU=1"]]
    workers.append(["--nthreads", "2", "--name", "cpu"])
    with command_line_cluster(workers, env=dask_env()) as scheduler:
        root = tmp_path / "g"
        root.mkdir()
        (root / "pipeline.yaml").write_text(
            "runner: 1\nname: gpu\nsteps:\n"
            "  render:\n    uses: shell\n    resources: {GPU: 1}\n"
            f"    for_each: {list(range(6))}\n"
            "    with:\n"
            '      run: "echo start $(date +%s.%N) > out/g${{ item }}.txt && sleep 0.3 '
            '&& echo end $(date +%s.%N) >> out/g${{ item }}.txt"\n'
            '      outputs: ["out/g${{ item }}.txt"]\n'
            "  plain:\n    uses: shell\n"
            f"    for_each: {list(range(6))}\n"
            "    with:\n"
            '      run: "echo ${{ item }} > out/c${{ item }}.txt"\n'
            '      outputs: ["out/c${{ item }}.txt"]\n',
            encoding="utf-8",
        )
        events = root / "events.jsonl"
        doc = _apply(
            root,
            "pipeline.yaml",
            "--executor",
            "dask",
            "--scheduler",
            scheduler,
            "--events",
            str(events),
        )
        assert doc["exit_code"] == 0
        passed = [json.loads(line) for line in events.read_text().splitlines()]
        passed = [e for e in passed if e["type"] == "StepPassed" and e["step"] == "render"]
        assert len(passed) == 6
        used = {e["worker"] for e in passed}
        assert len(used) == 1  # only the worker that declares a GPU
        spans = []
        for i in range(6):
            start, end = (
                float(line.split()[1])
                for line in (root / "out" / f"g{i}.txt").read_text().splitlines()
            )
            spans.append((start, end))
        spans.sort()
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))  # one at a time


def test_the_traceback_filter_keeps_runner_s_own() -> None:
    # The dask tests tolerate Dask's shutdown noise only: a traceback through runner still fails.
    import runner

    pkg = os.path.dirname(runner.__file__)
    noise = (
        "Exception ignored in: <function BaseEventLoop.__del__ at 0x1>\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/asyncio/base_events.py", line 1, in __del__\n'
        "TypeError: 'NoneType' object is not callable\n"
    )
    ours = (
        "Traceback (most recent call last):\n"
        f'  File "{pkg}/engine/apply.py", line 3, in apply_plan\n'
        "ValueError: bad\n"
    )
    assert runner_tracebacks(noise) == []
    assert runner_tracebacks(noise + ours) == [ours.rstrip("\n")]
    assert runner_tracebacks("runner hit a bug: KeyError") == ["runner hit a bug"]
