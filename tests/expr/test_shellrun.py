"""runner.expr.shellrun: real /bin/sh processes, their output, their exit, and their process group.

Most tests run twice (the ``started`` fixture): in runner's own working directory, where commands
start through os.posix_spawn, and in another one, where they start through subprocess.Popen."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.expr import shellrun
from runner.expr.shellrun import run_shell


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie no one has reaped yet counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture(params=["runner's directory", "another directory"])
def started(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[int]]:
    """The pids os.posix_spawn started; the test's commands run in tmp_path, which is runner's
    working directory or not. Checks afterwards that the expected way was taken."""
    pids: list[int] = []
    real = os.posix_spawn

    def recording(*args: object, **kwargs: object) -> int:
        pid = real(*args, **kwargs)  # type: ignore[arg-type]
        pids.append(pid)
        return pid

    monkeypatch.setattr(os, "posix_spawn", recording)
    if request.param == "runner's directory":
        monkeypatch.chdir(tmp_path)
    else:
        monkeypatch.chdir(tmp_path.parent)
    yield pids
    assert bool(pids) == (request.param == "runner's directory")


def test_output_exit_code_and_stdin(tmp_path: Path, started: list[int]) -> None:
    done = asyncio.run(run_shell("cat; printf 'out\\0bin'; echo err >&2; exit 3", cwd=tmp_path))
    assert (done.code, done.stdout, done.stderr) == (3, b"out\x00bin", b"err\n")
    assert not done.timed_out  # `cat` read an empty stdin and returned: no terminal, no pipe


def test_runs_in_cwd_with_env(tmp_path: Path, started: list[int]) -> None:
    done = asyncio.run(run_shell('pwd; echo "$GREETING"', cwd=tmp_path, env={"GREETING": "hi"}))
    assert done.stdout.decode().splitlines() == [str(tmp_path), "hi"]


def test_big_output_whole_or_its_tail(tmp_path: Path, started: list[int]) -> None:
    command = "head -c 3000000 /dev/zero | tr '\\0' a; printf END"
    whole = asyncio.run(run_shell(command, cwd=tmp_path))
    assert len(whole.stdout) == 3_000_003 and whole.stdout.endswith(b"aaEND")
    tail = asyncio.run(run_shell(command, cwd=tmp_path, keep=10))
    assert tail.stdout == b"aaaaaaaEND"


def test_timeout_kills_the_whole_group(tmp_path: Path, started: list[int]) -> None:
    pidfile = tmp_path / "bg.pid"
    began = time.monotonic()
    done = asyncio.run(
        run_shell(f"sleep 30 & echo $! > {pidfile}; echo started; wait", cwd=tmp_path, timeout=0.5)
    )
    assert done.timed_out and done.code is None
    assert done.stdout == b"started\n"  # what it printed before the timeout is kept
    assert time.monotonic() - began < 5
    assert _wait_gone(int(pidfile.read_text()))


def test_a_background_child_left_behind_dies_with_the_command(
    tmp_path: Path, started: list[int]
) -> None:
    pidfile = tmp_path / "bg.pid"
    done = asyncio.run(run_shell(f"sleep 30 & echo $! > {pidfile}", cwd=tmp_path))
    assert done.code == 0
    assert _wait_gone(int(pidfile.read_text()))


def test_cancel_kills_the_group_and_propagates(tmp_path: Path, started: list[int]) -> None:
    pidfile = tmp_path / "sh.pid"

    async def main() -> None:
        task = asyncio.create_task(run_shell(f"echo $$ > {pidfile}; sleep 30", cwd=tmp_path))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert _wait_gone(int(pidfile.read_text()))


def test_a_missing_directory_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        asyncio.run(run_shell("true", cwd=tmp_path / "nope"))


def test_many_at_once_each_gets_its_own_output(tmp_path: Path, started: list[int]) -> None:
    async def main() -> list[bytes]:
        runs = [run_shell(f"echo {i}; echo e{i} >&2", cwd=tmp_path) for i in range(40)]
        return [d.stdout + d.stderr for d in await asyncio.gather(*runs)]

    assert asyncio.run(main()) == [f"{i}\ne{i}\n".encode() for i in range(40)]


def test_no_descriptor_is_left_open(tmp_path: Path, started: list[int]) -> None:
    before = set(os.listdir("/proc/self/fd"))

    async def main() -> None:
        for _ in range(20):
            await run_shell("echo x", cwd=tmp_path)
        await run_shell("sleep 5", cwd=tmp_path, timeout=0.1)

    asyncio.run(main())
    leaked = set(os.listdir("/proc/self/fd")) - before
    # one /dev/null for every command's stdin is opened once per process, on purpose
    assert len(leaked) <= 1, leaked


def test_without_memfd_or_pidfd_the_fallbacks_do_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[int]
) -> None:
    """Where the kernel offers neither (old kernels, other systems, some sandboxes): an unlinked
    temporary file captures, a worker thread waits; timeouts still kill the group."""

    def refused(*_args: object) -> int:
        raise OSError("not here")

    monkeypatch.setattr(os, "memfd_create", refused)
    monkeypatch.setattr(os, "pidfd_open", refused)
    done = asyncio.run(run_shell("echo out; echo err >&2; exit 2", cwd=tmp_path))
    assert (done.code, done.stdout, done.stderr) == (2, b"out\n", b"err\n")
    pidfile = tmp_path / "bg.pid"
    slow = asyncio.run(
        run_shell(f"sleep 30 & echo $! > {pidfile}; wait", cwd=tmp_path, timeout=0.3)
    )
    assert slow.timed_out
    assert _wait_gone(int(pidfile.read_text()))
    assert not any(
        p.name.startswith("runner-capture-") for p in Path(tempfile.gettempdir()).iterdir()
    )


def test_the_command_gets_no_descriptor_runner_inherited(
    tmp_path: Path, started: list[int]
) -> None:
    """A descriptor runner was started with (a shell's `3>file`) is not the command's."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        done = asyncio.run(run_shell("ls /proc/$$/fd", cwd=tmp_path))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.stdout.split() == [b"0", b"1", b"2"], done


def test_sigpipe_has_its_default_action(tmp_path: Path, started: list[int]) -> None:
    """Python ignores SIGPIPE; the command must not: `yes` ends quietly when `head` is done."""
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    done = asyncio.run(run_shell("yes | head -n 2", cwd=tmp_path))
    assert (done.code, done.stdout, done.stderr) == (0, b"y\ny\n", b"")


def test_a_command_killed_by_a_signal_has_a_negative_code(
    tmp_path: Path, started: list[int]
) -> None:
    done = asyncio.run(run_shell("kill -TERM $$", cwd=tmp_path))
    assert done.code == -signal.SIGTERM and not done.timed_out


# -- simple commands, started without the shell where /bin/sh is dash ------------------------

needs_dash = pytest.mark.skipif(
    not shellrun._sh_is_dash() or not hasattr(os, "pidfd_open"),
    reason="simple commands start without the shell only where /bin/sh is dash (Linux)",
)


def _both_ways(
    command: str, root: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> tuple[tuple[Any, ...], tuple[Any, ...], list[str]]:
    """``command`` run without the shell, then (from the same files) through /bin/sh: each
    run's code, output and the files it left; and the programs os.posix_spawn started."""
    monkeypatch.chdir(root)
    spawned: list[str] = []
    real = os.posix_spawn

    def recording(path: str, *args: Any, **kw: Any) -> int:
        spawned.append(path)
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "posix_spawn", recording)
    runs = []
    simple = shellrun._simple
    pristine = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    for way in ("direct", "shell"):
        for p in root.iterdir():
            if p.is_file() and p.name not in pristine:
                p.unlink()
        for name, data in pristine.items():
            (root / name).write_bytes(data)
        if way == "shell":
            monkeypatch.setattr(shellrun, "_simple", lambda _command, _env=None: None)
        done = asyncio.run(run_shell(command, cwd=root, **kwargs))
        files = {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}
        runs.append((done.code, done.stdout, done.stderr, files))
    monkeypatch.setattr(shellrun, "_simple", simple)
    return runs[0], runs[1], spawned


@needs_dash
@pytest.mark.parametrize(
    "command",
    [
        "cat in.txt > out.txt",
        "  cat in.txt   in.txt\t>  out.txt\n",
        "cat < in.txt >> log.txt",
        "> first.txt cat in.txt > second.txt",  # both created, the last one gets the output
        "cat in.txt missing.txt > out.txt",  # cat's own complaint, exit 1
        "ls -1 . > listing.txt",
        "wc -c in.txt",
        "head -c 3 in.txt > sub=dir,x:y@z%+.txt",
    ],
)
def test_a_simple_command_runs_as_the_shell_would_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "log.txt").write_text("before\n")
    direct, shell, spawned = _both_ways(command, tmp_path, monkeypatch)
    assert direct == shell
    assert spawned[0] != "/bin/sh" and spawned[1:] == ["/bin/sh"]  # the first went direct


@needs_dash
@pytest.mark.parametrize(
    ("command", "values"),
    [
        ('cat "${RUNNER_VALUE_1}" > "${RUNNER_VALUE_2}"', ["in.txt", "out $(x) 'y'.txt"]),
        ('head -c "${RUNNER_VALUE_1}" in.txt', ["3"]),
        ('cat < "${RUNNER_VALUE_1}" >> log.txt', ["in.txt"]),
        ('wc -c "${RUNNER_VALUE_1}" in.txt', ["*.txt\n`id`"]),  # cat's complaint, the same
        ('"${RUNNER_VALUE_1}" in.txt', ["cat"]),
    ],
)
def test_a_simple_command_with_values_by_environment_runs_as_the_shell_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, values: list[str]
) -> None:
    """A word that is one value's reference (runner/expr/shellenv.py) is the value, one word
    as it is: started directly, it does what dash does with it."""
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "log.txt").write_text("before\n")
    env = {"PATH": os.environ["PATH"]} | {f"RUNNER_VALUE_{i}": v for i, v in enumerate(values, 1)}
    direct, shell, spawned = _both_ways(command, tmp_path, monkeypatch, env=env)
    assert direct == shell
    assert spawned[0] != "/bin/sh" and spawned[1:] == ["/bin/sh"]  # the first went direct


@needs_dash
@pytest.mark.parametrize(
    "command",
    [
        'cat "${RUNNER_VALUE_9}"',
        'cat a"${RUNNER_VALUE_1}"',
        'cat "${RUNNER_VALUE_1}"b',
        'cat "${X}"',
    ],
)
def test_a_reference_that_is_not_a_whole_word_of_a_set_value_goes_to_the_shell(
    command: str,
) -> None:
    assert shellrun._simple(command, {"RUNNER_VALUE_1": "in.txt", "X": "in.txt"}) is None


@needs_dash
@pytest.mark.parametrize(
    "command",
    [
        "no-such-command > out.txt",  # sh says it is not found (exit 127), out.txt made
        "cat in.txt > no/such/dir.txt",  # sh cannot create the file (exit 2)
        "./noshebang > out.txt",  # no #!: sh runs it as a script
        "./unexecutable",  # sh: permission denied (126)
        "cat in.txt > .",  # a directory: sh cannot create it
    ],
)
def test_what_cannot_start_directly_is_left_to_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "noshebang").write_text("echo from a script\n")
    (tmp_path / "noshebang").chmod(0o755)
    (tmp_path / "unexecutable").write_text("#!/bin/sh\necho no\n")
    direct, shell, spawned = _both_ways(command, tmp_path, monkeypatch)
    assert direct == shell
    assert direct[0] != 0 or command.startswith("./noshebang")
    assert spawned[-2:] == ["/bin/sh", "/bin/sh"]  # the first run ended up in the shell too


@needs_dash
@pytest.mark.parametrize(
    "command",
    [
        "echo $HOME > x",
        "cat 'in.txt'",
        "cat in.txt; cat in.txt",
        "cat in.txt | cat",
        "cat in.txt 2>err.txt",
        "cat in.txt >out.txt",
        "X=1 env",
        "echo hi",  # a builtin
        "cat *.txt",
        "cat ~/in.txt",
        "cat in.txt &",
        "cat in.txt # comment",
        "cat in.txt\ncat in.txt",
        "cat in.txt \\\n in.txt",
        "",
        # hostile bytes a value could carry: each is shell syntax or no word at all
        "cat `id`",
        "cat $(id)",
        'cat "a b"',
        "cat <script>",
        "cat in.txt\x1b[31m",
        "cat in.txt\r",
        "cat in.txt\x00",
        "cat in\u202etxt",
    ],
)
def test_anything_else_goes_to_the_shell(command: str) -> None:
    assert shellrun._simple(command) is None


@needs_dash
def test_the_command_gets_the_environment_dash_would_give_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "GREETING": "hi there",
        "NOT-A-NAME": "dropped",
        "IFS": "x",
        "OPTIND": "5",
        "PPID": "1",
        "PWD": "/nowhere",
        "_": "/some/program",
        "MULTI": "two\nlines",
    }
    direct, shell, spawned = _both_ways("env > env.txt", tmp_path, monkeypatch, env=env)
    assert direct[:3] == shell[:3] and spawned[0].endswith("/env")
    lines = direct[3]["env.txt"].decode().splitlines()
    assert sorted(lines) == sorted(shell[3]["env.txt"].decode().splitlines())  # (dash's order)
    assert f"PWD={tmp_path}" in lines and "GREETING=hi there" in lines
    # A PWD that names the directory by another path is kept; no PATH: dash's own search path.
    link = tmp_path.parent / f"{tmp_path.name}-link"
    link.symlink_to(tmp_path)
    env = {"PWD": str(link)}
    direct, shell, spawned = _both_ways("env > env.txt", tmp_path, monkeypatch, env=env)
    assert direct == shell and direct[3]["env.txt"] == f"PWD={link}\n".encode()
    assert spawned[0] != "/bin/sh"


@needs_dash
def test_a_signal_that_ends_a_simple_command_is_said_as_dash_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dash reports a command a signal ended with code 128+N and the signal's name on stderr
    (not for SIGINT or SIGPIPE); started without it, runner says the same."""
    for number in (signal.SIGTERM, signal.SIGINT):
        script = tmp_path / "selfkill"
        script.write_text(f"#!/bin/sh\necho before\nkill -{int(number)} $$\n")
        script.chmod(0o755)
        direct, shell, spawned = _both_ways("./selfkill > out.txt", tmp_path, monkeypatch)
        assert direct == shell
        assert direct[0] == 128 + number
        assert direct[2] == (b"Terminated\n" if number == signal.SIGTERM else b"")
        assert spawned[0].endswith("selfkill")


@needs_dash
def test_a_fifo_redirection_is_left_to_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a FIFO waits for its other end: inside posix_spawn that would hold the event
    loop, and the other end here is a command the loop has yet to start."""
    monkeypatch.chdir(tmp_path)
    spawned: list[str] = []
    real = os.posix_spawn

    def recording(path: str, *args: Any, **kw: Any) -> int:
        spawned.append(path)
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "posix_spawn", recording)
    (tmp_path / "in.txt").write_text("through the pipe\n")
    os.mkfifo(tmp_path / "pipe")

    async def both() -> list[Any]:
        writer = run_shell("cat in.txt > pipe", cwd=tmp_path, timeout=20)
        reader = run_shell("cat < pipe", cwd=tmp_path, timeout=20)
        return list(await asyncio.wait_for(asyncio.gather(writer, reader), 30))

    wrote, read = asyncio.run(both())
    assert (wrote.code, read.code, read.stdout) == (0, 0, b"through the pipe\n")
    assert spawned == ["/bin/sh", "/bin/sh"]
    assert shellrun._simple("cat in.txt > pipe") is not None  # simple, but not started so
