"""Issue 16 point 10: the disk fills up while an apply records its work.

For real: the project lives on a small tmpfs (mounted by the test; root only, as in CI). The
apply stops with a clear error (no traceback), its run is marked interrupted (not left
`running`), every element recorded before it stays recorded, and after the project moves to a
bigger disk the next apply resumes: recorded elements are not run again.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import runner_bin

N = 400

PIPE = f"""\
runner: 1
name: full
steps:
  make:
    uses: shell
    for_each: {list(range(N))}
    concurrency: 2
    with:
      run: "mkdir -p out && head -c 6000 /dev/urandom > out/e${{{{ item }}}}.bin"
      outputs: ["out/e${{{{ item }}}}.bin"]
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: the apply's output (400 x 6 KB, twice: files and objects) does not fit."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _apply(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json", "-q"],
        cwd=root, capture_output=True, text=True, check=False, timeout=600,
    )


def _completed(root: Path) -> set[int]:
    conn = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = conn.execute(
            "SELECT element FROM executions WHERE status='completed'"
        ).fetchall()
        return {r[0] for r in rows}
    finally:
        conn.close()


def test_disk_full_stops_cleanly_and_resumes_on_a_bigger_disk(
    small_disk: Path, tmp_path: Path
) -> None:
    (small_disk / "pipeline.yaml").write_text(PIPE, encoding="utf-8")
    res = _apply(small_disk)
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "disk" in res.stderr and "full" in res.stderr, res.stderr[-2000:]
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["exit_code"] == 1
    conn = sqlite3.connect(small_disk / ".runner" / "journal.db")
    try:
        runs = conn.execute("SELECT status, reason FROM runs").fetchall()
        running = conn.execute(
            "SELECT count(*) FROM executions WHERE status='running'"
        ).fetchone()[0]
    finally:
        conn.close()
    assert [r[0] for r in runs] == ["failed"] and "disk is full" in runs[0][1], runs
    assert running == 0
    recorded = _completed(small_disk)
    assert 0 < len(recorded) < N
    # every recorded element's output and object are whole
    for i in recorded:
        assert (small_disk / "out" / f"e{i}.bin").stat().st_size == 6000
    # a bigger disk: the same project copied, the next apply resumes
    bigger = tmp_path / "bigger"
    shutil.copytree(small_disk, bigger, symlinks=True)
    again = _apply(bigger)
    assert again.returncode == 0, again.stderr[-2000:]
    steps = json.loads(again.stdout)["steps"]
    assert steps[0]["status"] in ("ran", "partial", "cached", "completed"), steps
    assert _completed(bigger) >= set(range(N))
    conn = sqlite3.connect(bigger / ".runner" / "journal.db")
    try:
        reused = conn.execute(
            "SELECT count(*) FROM executions WHERE status='cached' AND run_id="
            "(SELECT id FROM runs ORDER BY created_at DESC LIMIT 1)"
        ).fetchone()[0]
    finally:
        conn.close()
    assert reused == len(recorded)  # what was recorded is not run again
    verify = subprocess.run(
        [*runner_bin(), "verify", "--json"], cwd=bigger, capture_output=True, text=True,
        check=False,
    )
    assert json.loads(verify.stdout)["ok"] is True, verify.stdout[-2000:]
