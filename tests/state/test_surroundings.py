"""What runner's surroundings do to it, said plainly (issue 33, item 8): a disk with no room
when the journal is made, and a FIFO where a file should be."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import runner_bin

PIPE = """\
runner: 1
name: small
steps:
  a: {uses: shell, with: {run: "echo hi"}}
"""


def _runner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Bounded: a read that blocks (a FIFO with no writer) fails the test instead of hanging it.
    return subprocess.run(
        [*runner_bin(), *args], cwd=cwd, capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs with no room left."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        (mount / "p.yaml").write_text(PIPE)
        with open(mount / "filler", "wb", buffering=0) as f:
            for size in (65536, 1024, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError:
                    pass
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_no_room_for_a_new_journal_says_the_disk_is_full(full_disk: Path) -> None:
    res = _runner(full_disk, "apply", "p.yaml")
    assert res.returncode == 1
    assert "is full" in res.stderr and "free some space" in res.stderr, res.stderr
    assert "damaged" not in res.stderr and "--repair" not in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    # with room again, the same project runs
    (full_disk / "filler").unlink()
    again = _runner(full_disk, "apply", "p.yaml", "--json")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("command", ["apply", "plan", "validate"])
def test_a_fifo_as_the_pipeline_file_is_refused(tmp_path: Path, command: str) -> None:
    os.mkfifo(tmp_path / "p.yaml")
    res = _runner(tmp_path, command, "p.yaml")
    assert res.returncode == 2, res.stderr
    assert "p.yaml: a FIFO (named pipe), not a regular file" in res.stderr


def test_a_fifo_read_by_a_step_is_refused_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: r\nsteps:\n  r: {uses: read, with: {path: data.yaml, as: yaml}}\n"
    )
    os.mkfifo(tmp_path / "data.yaml")
    res = _runner(tmp_path, "apply", "p.yaml")
    assert res.returncode == 2 and "data.yaml" in res.stderr, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
