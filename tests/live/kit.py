"""What the live tests share: a project on disk, and runner run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE", "OPENAI_API_KEY")}
    out.update(NO_COLOR="1", COLUMNS="200")
    return out


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    def statuses(self) -> dict[str, str]:
        return {s["id"]: s["status"] for s in self.doc["steps"]}

    def step(self, step_id: str) -> dict[str, Any]:
        found: dict[str, Any] = next(s for s in self.doc["steps"] if s["id"] == step_id)
        return found


def runner(root: Path, *args: str, timeout: float = 120) -> Run:
    """``runner ARGS`` in ``root``, to its end."""
    done = subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root, env=env(), capture_output=True, text=True, timeout=timeout,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def start_runner(root: Path, *args: str) -> subprocess.Popen[str]:
    """``runner ARGS`` in ``root``, running (its stderr is read line by line by the caller)."""
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *args],
        cwd=root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def output(run: Run, step_id: str) -> Any:
    """The output of ``step_id`` as the apply's --json reports it (a list for a for_each)."""
    return run.step(step_id).get("output")


def executions(root: Path, run_id: str, step_id: str) -> list[dict[str, Any]]:
    """The journaled executions of ``step_id`` in run ``run_id``, by element."""
    shown = runner(root, "runs", "show", run_id, "--json")
    assert shown.code == 0, shown.stderr
    rows = [e for e in shown.doc["executions"] if e["step_id"] == step_id]
    return sorted(rows, key=lambda e: e["element"] or 0)
