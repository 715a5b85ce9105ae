"""runner.surfaces.cli.leave: the console command ends without interpreter teardown, losing nothing.

Real processes: what a normal exit would still do that matters (atexit handlers, buffered
stdout, the exit status, a profiler's output) is done before the process leaves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
# Buffered stdio, as a user's shell gives (this machine's environment may say otherwise).
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "PYTHONPATH": str(REPO)}


def run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


ENTRY = """
import atexit, sys
from pathlib import Path
from runner.surfaces.cli import main
atexit.register(lambda: Path("atexit-ran").write_text("yes"))
sys.argv = ["runner", *sys.argv[1:]]
main()
"""


def test_atexit_handlers_run_and_buffered_output_arrives_whole(tmp_path: Path) -> None:
    # `runner steps --json` writes one long document: stdout is a pipe, so block-buffered.
    done = run(ENTRY, "steps", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert len(done.stdout) > 8192  # over one buffer: the tail was flushed at the exit
    assert "shell" in json.dumps(doc)
    assert (tmp_path / "atexit-ran").read_text() == "yes"


def test_the_exit_status_is_the_commands(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("runner: 1\nname: x\nsteps:\n  a: {uses: nope}\n")
    done = run(ENTRY, "validate", "bad.yaml", cwd=tmp_path)
    normal = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from runner.surfaces.cli.app import main; sys.argv=['runner', *sys.argv[1:]]; main()",
            "validate",
            "bad.yaml",
        ],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert normal.returncode not in (0, None)
    assert done.returncode == normal.returncode
    assert done.stderr == normal.stderr
    assert (tmp_path / "atexit-ran").read_text() == "yes"


def test_a_string_exit_is_printed_escaped_and_gives_1(tmp_path: Path) -> None:
    code = "from runner.surfaces.cli.leave import leave; leave('bye \\x1b[31mred')"
    done = run(code, cwd=tmp_path)
    assert done.returncode == 1
    assert "bye" in done.stderr
    assert "\x1b" not in done.stderr


def test_a_closed_stdout_gives_pythons_status(tmp_path: Path) -> None:
    # The reader is gone before the tail of the output is flushed (`runner ... | head -0`):
    # the status a normal exit gives then (120), in both.
    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.dup2(w, 1); os.close(r); os.close(w)\n"
        "sys.stdout.write('x' * 100)\n"
        "if sys.argv[1] == 'leave':\n"
        "    from runner.surfaces.cli.leave import leave; leave(0)\n"
    )
    assert run(code, "leave", cwd=tmp_path).returncode == 120
    assert run(code, "normal", cwd=tmp_path).returncode == 120


def test_a_profiler_still_gets_its_output(tmp_path: Path) -> None:
    out = tmp_path / "run.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "runner", "--version"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0


def test_a_running_non_daemon_thread_is_waited_for(tmp_path: Path) -> None:
    code = (
        "import threading, time\n"
        "from pathlib import Path\n"
        "from runner.surfaces.cli.leave import leave\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), Path('late').write_text('x'))).start()\n"
        "leave(3)\n"
    )
    done = run(code, cwd=tmp_path)
    assert done.returncode == 3
    assert (tmp_path / "late").read_text() == "x"
