"""The sandbox's spawner answers the same requests three ways: the C loop as a program
(_spawnc_exec) or as a module an interpreter imports (both built at install where there is a C
compiler), and the Python loop (_spawner.py, where they are not). Each confines and starts
commands the same way: the same files refused and granted, the network, the scratch directory,
direct starts and their fallback to the shell, large requests, timeouts and how a command
ended. Real commands, real bubblewrap and Landlock, through run_shell."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.expr import confined
from runner.expr.confined import Confinement, SandboxError, status
from runner.expr.shellrun import Finished, run_shell

pytestmark = pytest.mark.skipif(
    not status().confines, reason=f"no sandbox on this machine: {status().note}"
)

_BUILT = importlib.util.find_spec("runner.expr._spawnc") is not None
_PROGRAM = os.access(confined._PROGRAM, os.X_OK)


@pytest.fixture(params=["program", "module", "python"])
def loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Spawners of one loop only, for the test (the C ones where they were built)."""
    if (request.param == "module" and not _BUILT) or (request.param == "program" and not _PROGRAM):
        pytest.skip(f"the C loop's {request.param} was not built here (no C compiler at install)")
    if request.param == "program":
        monkeypatch.delenv("RUNNER_SPAWNER", raising=False)
    else:
        monkeypatch.setenv("RUNNER_SPAWNER", request.param)
    confined._close_hosts()
    yield request.param
    confined._close_hosts()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, the working directory (where simple commands start directly)."""
    real = Path(os.path.realpath(tmp_path))
    (real / "out").mkdir()
    (real / "in.txt").write_text("declared\n")
    (real / "notes.txt").write_text("not declared\n")
    monkeypatch.chdir(real)
    return real


def _run(
    command: str,
    root: Path,
    *,
    read: tuple[str, ...] = (),
    write: tuple[str, ...] = (),
    network: bool = False,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> Finished:
    confine = Confinement(
        str(root),
        read=tuple(str(root / r) for r in read),
        write=tuple(str(root / w) for w in write),
        write_dirs=tuple({str((root / w).parent) for w in write}),
        network=network,
    )
    env = {"PATH": os.environ["PATH"], **(env or {})}
    return asyncio.run(run_shell(command, cwd=root, env=env, timeout=timeout, confine=confine))


def test_the_loop_asked_for_is_the_one_that_answers(loop: str, root: Path) -> None:
    assert _run("true", root).code == 0
    assert {host.loop for host in confined._hosts.values()} == {loop}


def test_where_a_c_compiler_is_the_c_loop_was_built_and_its_program_is_the_default(
    root: Path,
) -> None:
    if sys.platform != "linux" or shutil.which("cc") is None:
        pytest.skip("no C compiler here: the Python loop is the one")
    spec = importlib.util.find_spec("runner.expr._spawnc")
    assert spec is not None and spec.origin, "runner/expr/_spawnc*.c were not built at install"
    assert _PROGRAM, "the spawner's program was not built at install (setup.py)"
    sources = list(Path(confined.__file__).parent.glob("_spawnc*.[ch]"))
    for built in (spec.origin, confined._PROGRAM):
        assert all(os.path.getmtime(s) <= os.path.getmtime(built) for s in sources), (
            f"{built} is older than its source: build it again (pip install -e .)"
        )
    confined._close_hosts()
    try:
        assert _run("true", root).code == 0
        assert {host.loop for host in confined._hosts.values()} == {"program"}
    finally:
        confined._close_hosts()


def test_reads_inside_the_project_only_what_is_declared(loop: str, root: Path) -> None:
    done = _run("cat in.txt", root, read=("in.txt",))
    assert (done.code, done.stdout) == (0, b"declared\n")
    done = _run("cat notes.txt", root, read=("in.txt",))
    assert done.code != 0 and b"Permission denied" in done.stderr
    done = _run("cat in.txt | tr a-z A-Z", root, read=("in.txt",))  # through the shell
    assert (done.code, done.stdout) == (0, b"DECLARED\n")


def test_a_ruleset_kept_for_a_requests_grants_serves_the_same_grants_only(
    loop: str, root: Path
) -> None:
    """The C loop keeps the rulesets it made by what they grant (a fan-out's leaves ask the
    same): a request granting anything else, or the same path now another file, gets its own."""
    for _ in range(2):
        done = _run("cat in.txt", root, read=("in.txt",))
        assert (done.code, done.stdout) == (0, b"declared\n")
        done = _run("cat notes.txt", root, read=("in.txt",))
        assert done.code != 0 and b"Permission denied" in done.stderr
    done = _run("cat notes.txt", root, read=("notes.txt",))
    assert (done.code, done.stdout) == (0, b"not declared\n")
    done = _run("cat in.txt", root, read=("notes.txt",))
    assert done.code != 0 and b"Permission denied" in done.stderr
    (root / "next.txt").write_text("replaced\n")
    os.replace(root / "next.txt", root / "in.txt")  # the same path, another inode
    done = _run("cat in.txt", root, read=("in.txt",))
    assert (done.code, done.stdout) == (0, b"replaced\n")


def test_writes_only_the_declared_outputs(loop: str, root: Path) -> None:
    done = _run("cat in.txt > out/a.txt", root, read=("in.txt",), write=("out/a.txt",))
    assert done.code == 0, done
    assert (root / "out/a.txt").read_text() == "declared\n"
    done = _run("echo x > stray.txt", root, write=("out/a.txt",))
    assert done.code != 0 and not (root / "stray.txt").exists()
    done = _run("echo x >> in.txt", root, read=("in.txt",))
    assert done.code != 0 and (root / "in.txt").read_text() == "declared\n"


def test_a_direct_start_that_cannot_exec_is_run_by_the_shell(loop: str, root: Path) -> None:
    tool = root / "tool"
    tool.write_text("echo from the script > out/s.txt\n")  # no #!: exec refuses, sh runs it
    tool.chmod(0o755)
    done = _run("./tool", root, read=("tool",), write=("out/s.txt",))
    assert done.code == 0, done
    assert (root / "out/s.txt").read_text() == "from the script\n"
    done = _run("./missing", root)
    assert done.code == 127 and b"not found" in done.stderr


def test_a_direct_start_finds_its_program_along_path_as_dash_does(loop: str, root: Path) -> None:
    """The spawner's child looks a simple command's program up along PATH: the first regular,
    executable file (an empty entry: the working directory), else the shell says not found."""
    for folder in ("a", "b", "c"):
        (root / folder).mkdir()
    (root / "a" / "tool").mkdir()  # a directory of that name: passed over
    (root / "b" / "tool").write_text("echo not executable\n")  # not executable: passed over
    found = root / "c" / "tool"
    found.write_text("#!/bin/sh\necho from c > out/t.txt\n")
    found.chmod(0o755)
    search = f"{root}/a:{root}/b:{root}/c:{os.environ['PATH']}"
    done = _run("tool", root, read=("a", "b", "c"), write=("out/t.txt",), env={"PATH": search})
    assert done.code == 0, done
    assert (root / "out/t.txt").read_text() == "from c\n"
    here = root / "here"
    here.write_text("#!/bin/sh\necho from the working directory\n")
    here.chmod(0o755)
    done = _run("here", root, read=("here",), env={"PATH": f"/nonexistent::{search}"})
    assert (done.code, done.stdout) == (0, b"from the working directory\n"), done
    done = _run("no-such-tool-anywhere", root, env={"PATH": search})
    assert done.code == 127 and b"not found" in done.stderr


def test_the_network_is_reached_only_when_allowed(loop: str, root: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    port = server.getsockname()[1]
    call = (
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
    )
    try:
        assert _run(call, root).code != 0
        assert _run(call, root, network=True).code == 0
        server.accept()[0].close()
    finally:
        server.close()


def test_the_scratch_directory_is_the_commands_own_and_replaces_tmpdir(
    loop: str, root: Path
) -> None:
    done = _run('echo "$TMPDIR"; touch "$TMPDIR/made"', root, env={"TMPDIR": str(root)})
    assert done.code == 0, done
    scratch = done.stdout.decode().strip()
    assert scratch and scratch != str(root)
    deadline = time.monotonic() + 10  # (removed once runner has its answer)
    while os.path.exists(f"{scratch}/made") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(f"{scratch}/made"), "a scratch left with files is removed"
    again = _run('echo "$TMPDIR"', root)
    assert again.stdout.decode().strip() != scratch


def test_a_large_request_travels_whole(loop: str, root: Path) -> None:
    value = "v" * 100_000  # beyond what one message holds: the request goes in a memory file
    done = _run('printf %s "$BIG" | wc -c', root, env={"BIG": value})
    assert (done.code, done.stdout.strip()) == (0, b"100000")


def test_how_a_command_ended_is_said_as_it_ended(loop: str, root: Path) -> None:
    assert _run("exit 3", root).code == 3
    assert _run("kill -TERM $$", root).code == -15
    marker = f"47.{os.getpid()}1"
    started = time.monotonic()
    done = _run(f"sleep {marker} & sleep {marker}", root, timeout=0.5)
    assert done.timed_out and time.monotonic() - started < 10
    deadline = time.monotonic() + 10
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(marker), "a timed-out command's group outlived it"


def test_a_missing_working_directory_is_said(loop: str, root: Path) -> None:
    gone = root / "gone"
    confine = Confinement(str(root))
    with pytest.raises(OSError, match="No such file or directory"):
        asyncio.run(run_shell("true", cwd=gone, env={"PATH": "/usr/bin:/bin"}, confine=confine))


def test_a_nul_byte_never_reaches_a_request(root: Path) -> None:
    with pytest.raises(SandboxError, match="NUL"):
        _run("true", root, env={"X": "a\x00b"})


def _running(marker: str) -> bool:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False)
    return found.returncode == 0


def test_a_first_apply_starts_its_spawner_beside_its_work_and_a_reusing_one_starts_none(
    tmp_path: Path,
) -> None:
    from tests.conftest import Project

    project = Project(tmp_path)
    project.write("runner.toml", "")
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: warm
        steps:
          first:
            uses: shell
            with:
              run: echo one > out/one.txt
              outputs: [out/one.txt]
          never:
            uses: shell
            needs: [first]
            when: "${{ 1 == 2 }}"
            with:
              run: echo two > out/two.txt
              outputs: [out/two.txt]
        """,
    )
    confined._close_hosts()
    try:
        assert project.apply()["_exit"] == 0
        assert confined._hosts, "a first apply starts the spawner"
        confined._close_hosts()
        doc = project.apply()
        assert doc["_exit"] == 0 and {s["status"] for s in doc["steps"]} <= {"cached", "skipped"}
        assert not confined._hosts, "an apply that reuses every command's step started a spawner"
    finally:
        confined._close_hosts()


def test_beside_many_entries_under_a_low_descriptor_limit_commands_keep_that_limit(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("a hard descriptor limit this low leaves nothing to raise")
    crowd = Path(os.path.realpath(tmp_path))
    for i in range(1500):  # the project's siblings: base grants, one descriptor each
        (crowd / f"sibling-{i}").touch()
    root = crowd / "project"
    (root / "out").mkdir(parents=True)
    (root / "in.txt").write_text("declared\n")
    (root / "notes.txt").write_text("not declared\n")
    monkeypatch.chdir(root)
    confined._close_hosts()
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        done = _run("cat in.txt; ulimit -n", root, read=("in.txt",))
        assert (done.code, done.stdout) == (0, b"declared\n1024\n"), done
        assert _run("cat notes.txt", root, read=("in.txt",)).code != 0
        assert (crowd / "sibling-7").exists() and _run(f"cat {crowd}/sibling-7", root).code == 0
    finally:
        confined._close_hosts()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_environment_name_holding_equals_is_refused_as_exec_would(root: Path) -> None:
    with pytest.raises(SandboxError, match="illegal environment variable name"):
        _run("true", root, env={"A=B": "c"})


def test_a_program_that_cannot_run_gives_way_to_the_module(
    root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _BUILT:
        pytest.skip("the C loop's module was not built here")
    broken = tmp_path_factory.mktemp("bin") / "_spawnc_exec"
    broken.write_bytes(b"\x7fELF not a program")  # executable, and exec refuses it
    broken.chmod(0o755)
    monkeypatch.delenv("RUNNER_SPAWNER", raising=False)
    monkeypatch.setattr(confined, "_PROGRAM", str(broken))
    monkeypatch.setattr(confined, "_program_failed", False)
    confined._close_hosts()
    try:
        done = _run("cat in.txt", root, read=("in.txt",))
        assert (done.code, done.stdout) == (0, b"declared\n"), done
        assert {host.loop for host in confined._hosts.values()} == {"module"}
        assert confined.status().kind == "bubblewrap+landlock", confined.status().note
    finally:
        confined._close_hosts()


def test_a_c_loop_built_before_a_change_of_the_protocol_gives_way_to_the_python_loop(
    root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A built loop older than its sources (a checkout updated, not yet built again) says
    another protocol in its first word: it is sent nothing it would misread."""
    old = tmp_path_factory.mktemp("bin") / "_spawnc_exec"
    old.write_text(
        f"#!{sys.executable}\nimport socket, sys\n"
        "control = socket.socket(fileno=int(sys.argv[1]))\n"
        'control.send(b"ready 6 c")  # (no protocol: the words before it)\n'
        "control.recv(1)\n"
    )
    old.chmod(0o755)
    monkeypatch.delenv("RUNNER_SPAWNER", raising=False)
    monkeypatch.setattr(confined, "_PROGRAM", str(old))
    monkeypatch.setattr(confined, "_program_failed", False)
    monkeypatch.setattr(confined, "_c_stale", False)
    confined._close_hosts()
    try:
        done = _run("cat in.txt", root, read=("in.txt",))
        assert (done.code, done.stdout) == (0, b"declared\n"), done
        assert {host.loop for host in confined._hosts.values()} == {"python"}
        assert confined.status().kind == "bubblewrap+landlock", confined.status().note
    finally:
        confined._close_hosts()


def test_a_malformed_request_is_refused_and_the_spawner_goes_on(loop: str, root: Path) -> None:
    host = confined._host(False)
    control = host.channel.sock
    read, write = os.pipe()
    control.settimeout(10)
    try:
        for message, fds, answer in (
            (b"i7\x00cfoo\x00\x00", 3, b"error 7 "),
            (b"i8\x00c", 3, b"error 8 "),
            (b"i9\x00zbad\x00", 3, b"error 9 "),
            (b"i10\x00cx\x00dy\x00o1 2\x00", 3, b"error 10 "),
            (b"i11\x00cx\x00dy\x00", 2, b"error 11 malformed"),  # a stream missing
            (b"cx\x00dy\x00", 3, b"error 0 malformed"),  # no request number
            (b"ix\x00cx\x00dy\x00", 3, b"error 0 malformed"),
        ):
            socket.send_fds(control, [message], [read, write, write][:fds])
            assert control.recv(200).startswith(answer), message
        control.send(b"k12345\x00")  # a kill for no command it runs: nothing to answer
    finally:
        control.settimeout(None)
        os.close(read)
        os.close(write)
    assert host.process.poll() is None
    assert _run("cat in.txt", root, read=("in.txt",)).stdout == b"declared\n"


def test_commands_of_several_threads_loops_share_one_spawner_each_answered_its_own(
    loop: str, root: Path
) -> None:
    """watch and serve run applies from threads of their own, each its own event loop: their
    commands' answers come on one channel and each reaches the loop that waits for it."""
    import threading

    results: dict[int, list[bytes]] = {}

    def lane(n: int) -> None:
        async def both() -> list[bytes]:
            done = await asyncio.gather(
                *(
                    run_shell(f"sleep 0.0{k}; echo {n}-{k}", cwd=root, env=env, confine=confine)
                    for k in range(4)
                )
            )
            return [d.stdout for d in done]

        results[n] = asyncio.run(both())

    env = {"PATH": os.environ["PATH"]}
    confine = Confinement(str(root))
    threads = [threading.Thread(target=lane, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {n: [f"{n}-{k}\n".encode() for k in range(4)] for n in range(3)}
    assert len({id(host) for host in confined._hosts.values()}) == 1


def test_a_cancelled_command_has_its_group_killed_and_the_spawner_goes_on(
    loop: str, root: Path
) -> None:
    marker = f"53.{os.getpid()}1"
    confine = Confinement(str(root))
    env = {"PATH": os.environ["PATH"]}

    async def cancelled() -> None:
        task = asyncio.ensure_future(
            run_shell(f"sleep {marker} & sleep {marker}", cwd=root, env=env, confine=confine)
        )
        deadline = time.monotonic() + 10
        while not _running(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert _running(marker), "the command never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    deadline = time.monotonic() + 10
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(marker), "a cancelled command's group outlived it"
    assert _run("cat in.txt", root, read=("in.txt",)).stdout == b"declared\n"


def test_a_spawner_dying_mid_command_is_said_as_the_commands_failure(loop: str, root: Path) -> None:
    marker = f"59.{os.getpid()}3"
    confine = Confinement(str(root))
    env = {"PATH": os.environ["PATH"]}

    async def killed_under_it() -> None:
        task = asyncio.ensure_future(
            run_shell(f"sleep {marker}", cwd=root, env=env, confine=confine)
        )
        deadline = time.monotonic() + 10
        while not _running(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for host in list(confined._hosts.values()):  # the spawner itself (bwrap's child)
            pid = host.process.pid
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            for spawner in [int(c) for c in children] or [pid]:
                os.kill(spawner, signal.SIGKILL)
        with pytest.raises(SandboxError, match="spawner ended without saying"):
            await asyncio.wait_for(task, 10)

    asyncio.run(killed_under_it())
    assert _run("cat in.txt", root, read=("in.txt",)).stdout == b"declared\n"


HOSTILE = [
    'it\'s "quoted" $HOME `id` $(touch PWNED) ;|&<>',
    "line one\nEOF\nline three",
    "-n --help",
    "tab\tbell\x07escape\x1b[31m del\x7f",
    "ünïcødé ☃ \udcff",  # (a byte that is no UTF-8, as os.fsencode carries it)
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_reaches_the_command_as_data(loop: str, root: Path, value: str) -> None:
    done = _run('printf %s "$V"', root, env={"V": value})
    assert done.code == 0, done
    assert done.stdout == os.fsencode(value)
    assert not (root / "PWNED").exists()
