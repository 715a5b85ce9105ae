"""What a careless user types gets one clear message, never "runner hit a bug", and no run is
left `running` by it. Each case is a real `runner` process.

The class: files runner is told to use that the system refuses or that never end (an --events
file in a missing folder or on a full device, a pipeline that is /dev/zero, the state on
/dev/null), and values runner records that JSON cannot carry (a reviewer's input file or an
edited output holding NaN: see tests/security/test_not_json.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = """\
runner: 1
name: q
steps:
  say: {uses: shell, with: {run: "printf hi"}}
"""


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _no_run_left_running(root: Path) -> None:
    listed = _runner(root, "runs", "list", "--json")
    if listed.returncode == 0:
        assert all(r["status"] != "running" for r in json.loads(listed.stdout)["runs"])


CASES = [
    (("apply", "p.yaml", "--events", "missing/dir/events.jsonl"), 2,
     "--events missing/dir/events.jsonl: No such file or directory"),
    (("validate", "/dev/zero"), 2, "/dev/zero: a character device, not a regular file"),  # read forever before
    (("apply", "p.yaml", "--state", "/dev/null"), 1, "/dev/null/journal.db: Not a directory"),
]


@pytest.mark.parametrize(("args", "code", "says"), CASES, ids=lambda v: str(v)[:30])
def test_a_path_the_system_refuses_is_one_clear_message(
    tmp_path: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    done = _runner(tmp_path, *args)
    assert done.returncode == code, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
    _no_run_left_running(tmp_path)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_an_events_file_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path: Path) -> None:
    """Before: ENOSPC from the events file was a traceback and the run stayed `running`."""
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    done = _runner(tmp_path, "apply", "p.yaml", "--events", "/dev/full", "--json")
    assert done.returncode == 0, done.stderr
    assert "warning: --events: cannot write (No space left on device)" in done.stderr
    assert "Traceback" not in done.stderr
    run_id = json.loads(done.stdout)["run"]["id"]
    events = _runner(tmp_path, "runs", "events", run_id)  # the journal kept them
    assert [json.loads(line)["type"] for line in events.stdout.splitlines()][-1] == "RunFinished"
    _no_run_left_running(tmp_path)
