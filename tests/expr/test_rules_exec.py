"""The exec check: exit status, stderr in the reason, timeouts kill the whole process group."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from runner.errors import Location
from runner.expr.commandscope import scoped
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


def _running(marker: str) -> list[int]:
    """Processes (seen from here, whatever pid namespace they are in) whose command line holds
    ``marker``: not zombies, which are dead and only wait for their parent to reap them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _gone(marker: str) -> bool:
    deadline = time.monotonic() + 3
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(marker)


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unsandboxed"])
def test_timeout_kills_the_whole_process_group(tmp_path: Path, sandbox: bool) -> None:
    # A fractional sleep no other process runs: the marker the processes are found by.
    marker = f"30.{os.getpid()}{int(sandbox)}1"
    command = f"sleep {marker} & echo waiting >&2; exec sleep {marker}"
    started = time.monotonic()
    with scoped(sandbox, False):
        result = run({"run": command, "timeout": 0.5}, tmp_path)
    assert time.monotonic() - started < 5
    assert result == Verdict(
        False,
        [
            f"exec: `{command}` timed out after 0.5 s (its process group was killed); "
            "stderr: waiting"
        ],
    )
    assert _gone(marker), "a process of the check outlived it"


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unsandboxed"])
def test_background_children_of_a_finished_command_do_not_outlive_it(
    tmp_path: Path, sandbox: bool
) -> None:
    marker = f"30.{os.getpid()}{int(sandbox)}2"
    with scoped(sandbox, False):
        result = run(
            {
                "run": f"(sleep {marker} >/dev/null 2>&1 &) ; sleep {marker} >/dev/null 2>&1 &",
                "timeout": 5,
            },
            tmp_path,
        )
    assert result.passed
    assert _gone(marker)
