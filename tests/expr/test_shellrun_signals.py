"""A command gets SIGINT and SIGQUIT with their default action however runner was started.

A shell starts a background job (`runner apply ... &` in a script) with SIGINT and SIGQUIT
ignored, and exec keeps an ignored signal ignored: a step's `kill -INT` (or `timeout -s INT`)
then did nothing, so its result depended on how runner was launched, and the suite's
signal test failed when pytest itself was started in the background (issue 40). Each case runs
runner in a real child Python whose SIGINT is ignored, as such a launch leaves it, over both ways
a command is started (posix_spawn in the working directory, Popen elsewhere) and /bin/sh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import asyncio, json, signal, sys
from pathlib import Path
from runner.expr.shellrun import run_shell

signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `cmd &` from a non-interactive shell
signal.signal(signal.SIGQUIT, signal.SIG_IGN)
cwd = Path(sys.argv[1])
done = asyncio.run(run_shell(sys.argv[2], cwd=cwd))
print(json.dumps({"code": done.code, "before": done.stdout.decode()}))
"""


@pytest.mark.parametrize("number", [2, 3], ids=["SIGINT", "SIGQUIT"])
@pytest.mark.parametrize(
    ("command", "in_cwd"),
    [
        ("./selfkill", True),  # a simple command, posix_spawn
        ("./selfkill", False),  # another directory: Popen
        ("./selfkill; echo after", True),  # through /bin/sh
        ("./selfkill; echo after", False),
    ],
    ids=["direct-spawn", "direct-popen", "shell-spawn", "shell-popen"],
)
def test_a_command_a_signal_ends_is_ended_even_when_runner_ignores_it(
    tmp_path: Path, command: str, in_cwd: bool, number: int
) -> None:
    script = tmp_path / "selfkill"
    script.write_text(f"#!/bin/sh\necho before\nkill -{number} $$\necho survived\n")
    script.chmod(0o755)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), command],
        cwd=tmp_path if in_cwd else tmp_path.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert "survived" not in done["before"]
    if command == "./selfkill":
        assert done["code"] == 128 + number
    else:  # the shell goes on after the killed command, as it would with the default action
        assert done["before"] == "before\nafter\n"
