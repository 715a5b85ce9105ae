"""The exec check: exit status, stderr in the reason, timeouts kill the whole process group."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from runner.errors import Location
from runner.expr.rules import Verdict, compile_rule


def run(raw: Any, root: Path, context: dict[str, Any] | None = None) -> Verdict:
    rule = compile_rule(
        {"exec": raw},
        where_of=lambda _p: Location("p.yaml", 1, 1),
        patterns={},
        named={},
        root=root,
    )
    return asyncio.run(rule.evaluate(context or {}, root=root))


def test_exit_zero_passes_in_the_root(tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("x")
    assert run({"run": "test -s here.txt"}, tmp_path) == Verdict(True, [])


def test_failure_reports_exit_code_and_stderr_tail(tmp_path: Path) -> None:
    result = run({"run": "echo noise; echo 'line 1' >&2; echo 'it broke' >&2; exit 3"}, tmp_path)
    assert result == Verdict(
        False,
        [
            "exec: `echo noise; echo 'line 1' >&2; echo 'it broke' >&2; exit 3` exited with 3; "
            "stderr: line 1\nit broke"
        ],
    )


def test_expression_values_are_shell_quoted(tmp_path: Path) -> None:
    hostile = "x'; touch pwned; echo '"
    result = run({"run": "test ${{ reply }} = ${{ reply }}"}, tmp_path, {"reply": hostile})
    assert result.passed
    assert not (tmp_path / "pwned").exists()


def test_env_values_are_passed(tmp_path: Path) -> None:
    result = run(
        {"run": 'test "$LABEL" = cat', "env": {"LABEL": "${{ label }}"}}, tmp_path, {"label": "cat"}
    )
    assert result.passed


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, only waiting for its parent to reap it


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    command = "sleep 30 & echo $! > bg.pid; echo $$ > sh.pid; echo waiting >&2; wait"
    started = time.monotonic()
    result = run({"run": command, "timeout": 0.5}, tmp_path)
    assert time.monotonic() - started < 5
    assert result == Verdict(
        False,
        [
            f"exec: `{command}` timed out after 0.5 s (its process group was killed); "
            "stderr: waiting"
        ],
    )
    pids = [int((tmp_path / name).read_text()) for name in ("bg.pid", "sh.pid")]
    deadline = time.monotonic() + 3
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a process of the check outlived it"


def test_background_children_of_a_finished_command_do_not_outlive_it(tmp_path: Path) -> None:
    result = run(
        {
            "run": "(sleep 30 >/dev/null 2>&1 &) ; sleep 30 >/dev/null 2>&1 & echo $! > bg.pid",
            "timeout": 5,
        },
        tmp_path,
    )
    assert result.passed
    pid = int((tmp_path / "bg.pid").read_text())
    deadline = time.monotonic() + 3
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
