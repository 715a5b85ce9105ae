"""Crash safety: SIGKILL an apply at several points, re-apply until it completes.

What must hold: the run completes with correct outputs; a step whose completion was journaled
before a kill never starts again (its completed execution is its last execution); the state
verifies clean; and a further apply runs nothing.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

LAYERS, WIDTH = 12, 5  # 60 steps: each layer fans in from every step of the layer before


def step_id(layer: int, j: int) -> str:
    return f"s{layer:02d}_{j}"


def write_pipeline(root: Path) -> None:
    lines = ["runner: 1", "name: crash", "steps:"]
    for layer in range(LAYERS):
        for j in range(WIDTH):
            sid = step_id(layer, j)
            ins = [f"out/{step_id(layer - 1, k)}.txt" for k in range(WIDTH)] if layer else []
            cat = f"cat {' '.join(ins)} | wc -l" if ins else "echo 1"
            cat += f" > out/{sid}.txt"
            run = f"sleep 0.05 && {cat} && echo {sid} >> ran/{sid}.log"
            lines += [
                f"  {sid}:",
                "    uses: shell",
                "    with:",
                f'      run: "{run}"',
                f"      inputs: {json.dumps(ins)}",
                f"      outputs: [out/{sid}.txt, ran/{sid}.log]",
            ]
            if layer:  # inputs alone do not order steps; `needs` does
                needs = [step_id(layer - 1, k) for k in range(WIDTH)]
                lines.append(f"    needs: {json.dumps(needs)}")
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def start(root: Path, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "apply",
            "pipeline.yaml",
            "--json",
            "--quiet",
            "--state",
            str(state),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def outputs(root: Path) -> int:
    out = root / "out"
    return sum(1 for _ in out.iterdir()) if out.is_dir() else 0


def completed_steps(state: Path) -> set[str]:
    if not (state / "journal.db").exists():
        return set()
    with sqlite3.connect(state / "journal.db") as db:
        try:
            rows = db.execute("SELECT step_id FROM executions WHERE status='completed'")
            return {r[0] for r in rows}
        except sqlite3.OperationalError:  # killed (or polled) before the first migration ran
            return set()


def kill_when(
    proc: subprocess.Popen[str],
    root: Path,
    *,
    after_s: float | None = None,
    new_outputs: int | None = None,
) -> bool:
    """SIGKILL ``proc`` after a delay or once it produced some outputs; False if it finished."""
    began, before = time.monotonic(), outputs(root)
    while proc.poll() is None:
        elapsed = time.monotonic() - began
        if (
            (after_s is not None and elapsed >= after_s)
            or (new_outputs is not None and outputs(root) - before >= new_outputs)
            or elapsed > 60
        ):
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            return True
        time.sleep(0.01)
    proc.communicate()
    return False


def test_sigkill_at_several_points_then_resume(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "state"
    root.mkdir()
    write_pipeline(root)
    kills = 0
    done_at_kill: list[set[str]] = []
    for point in (
        {"after_s": 0.3},
        {"new_outputs": 6},
        {"after_s": 0.7},
        {"new_outputs": 10},
        {"after_s": 1.2},
    ):
        if kill_when(start(root, state), root, **point):
            kills += 1
            time.sleep(0.1)  # let orphaned shell children of the killed process finish
            done_at_kill.append(completed_steps(state))
    assert kills >= 3, "the pipeline finished too fast to be killed; make it slower"
    assert any(done_at_kill), "no kill happened after a step completed"

    for _ in range(5):
        proc = start(root, state)
        out, _err = proc.communicate(timeout=120)
        doc = json.loads(out)
        if doc["exit_code"] == 0:
            break
    assert doc["exit_code"] == 0, json.dumps(doc)[:3000]
    assert doc["run"]["status"] == "completed"

    ids = {step_id(layer, j) for layer in range(LAYERS) for j in range(WIDTH)}
    with sqlite3.connect(state / "journal.db") as db:
        cursor = db.execute("SELECT id, step_id, status, run_id FROM executions ORDER BY id")
        rows = cursor.fetchall()
        statuses = {r[0] for r in db.execute("SELECT status FROM runs")}
    completed: dict[str, int] = {}
    for exec_id, sid, status, _run in rows:
        if status == "completed":
            assert sid not in completed, f"{sid} completed twice"
            completed[sid] = exec_id
    assert set(completed) == ids
    # Nothing started again after its completion was journaled (later runs only use the cache).
    for exec_id, sid, status, _run in rows:
        assert exec_id <= completed[sid] or status == "cached", f"{sid} ran again ({status})"
    for before in done_at_kill:
        assert before <= set(completed)
    # The killed runs are not left "running" forever.
    assert "running" not in statuses

    last = f"out/{step_id(LAYERS - 1, 0)}.txt"
    assert (root / last).read_text().strip() == str(WIDTH)
    verify = subprocess.run(
        [sys.executable, "-m", "runner", "verify", "--state", str(state), "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["ok"] is True

    again = start(root, state)
    out, _err = again.communicate(timeout=120)
    assert json.loads(out)["summary"] == {"ran": 0, "cached": 60, "skipped": 0, "failed": 0}
