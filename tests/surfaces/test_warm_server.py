"""`runner apply` through a warm server (runner/warm) is the apply run in the command's own process:
the same output, exit status, files and journal; the command's environment, working directory,
umask and streams; Ctrl-C and a killed command stop it as they stop an apply in its process. A
command the server cannot stand in for (confined, another import set-up, an imported file
changed) runs itself.

Every test runs real processes: the console entry point in a fresh interpreter, a server it
starts, the server's forked children, their sandboxed steps.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.warm import control
from tests.surfaces.test_quickapply import _RUN_ID, _SECONDS, INVALID
from tests.surfaces.test_quickapply import FAILS as PIPELINE

LAUNCHER = "from runner.surfaces.cli import main\nmain()\n"


class Warm:
    """A server directory of the test's own, and the command run as a user's console script
    is (a launcher file: the import path the same from any directory)."""

    def __init__(self, home: Path) -> None:
        self.folder = tempfile.mkdtemp(prefix="rs-", dir="/tmp")  # a socket path is <108 bytes
        self.launcher = home / "runner_launch.py"
        self.launcher.write_text(LAUNCHER)
        self.env = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE",)}
        self.env.update(RUNNER_SERVER="1", RUNNER_SERVER_DIR=self.folder, NO_COLOR="1")

    def run(
        self, cwd: Path, *args: str, server: bool = True, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, RUNNER_SERVER="1" if server else "0")
        env.update(kwargs.pop("env", {}))  # type: ignore[call-overload]
        return subprocess.run(
            [sys.executable, str(self.launcher), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **kwargs,  # type: ignore[arg-type]
        )

    def served(self) -> int:
        return sum(s["served"] for s in control.statuses(self.folder))

    def wait_for_server(self, count: int = 1) -> list[dict[str, object]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = control.statuses(self.folder)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no warm server came up in {self.folder}")

    def stop(self) -> None:
        pids = [s["pid"] for s in control.statuses(self.folder)]
        control.stop_all(self.folder)
        deadline = time.monotonic() + 20
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    w = Warm(tmp_path)
    home = tmp_path / "first"
    home.mkdir()
    (home / "p.yaml").write_text(
        "runner: 1\nname: w\nsteps:\n  a: {uses: hash, with: {value: 1}}\n"
    )
    first = w.run(home, "apply", "p.yaml", "-q")  # runs itself, and starts the server
    assert first.returncode == 0, first.stderr
    w.wait_for_server()
    try:
        yield w
    finally:
        w.stop()


def _shown(res: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    def plain(text: str) -> str:
        return _SECONDS.sub("T", _RUN_ID.sub("RUN", text))

    return res.returncode, plain(res.stdout), plain(res.stderr)


@pytest.mark.parametrize(
    ("pipeline", "args"),
    [
        (PIPELINE, ()),
        (PIPELINE, ("--json",)),
        (PIPELINE, ("-q", "-p", "n=2", "--jobs", "2")),
        (PIPELINE, ("-p", "n=two")),  # a param of the wrong type
        (PIPELINE, ("--force",)),  # left to click, in the child as in the command
        (INVALID, ()),
        (None, ()),  # no pipeline file
    ],
)
def test_an_apply_through_the_server_prints_exits_and_writes_as_in_its_own_process(
    warm: Warm, tmp_path: Path, pipeline: str | None, args: tuple[str, ...]
) -> None:
    shown = []
    for server in (True, False):
        root = tmp_path / ("served" if server else "own")
        root.mkdir()
        (root / "runner.toml").write_text("")
        if pipeline is not None:
            (root / "pipeline.yaml").write_text(pipeline)
        outcomes = []
        for _ in range(2):  # a run, then the same again (a no-op, or the failure again)
            before = warm.served()
            res = warm.run(root, "apply", "pipeline.yaml", *args, server=server)
            assert warm.served() == before + (1 if server else 0)
            outcomes.append(_shown(res))
        files = sorted(p.name for p in root.iterdir() if p.is_file())
        outcomes.append((files, (root / "a.txt").read_text() if (root / "a.txt").exists() else ""))
        shown.append(outcomes)
    assert shown[0] == shown[1]


STATEFUL = """\
runner: 1
name: state
steps:
  a:
    uses: shell
    with:
      pass_env: [GREETING]
      run: 'printf "%s|" "$GREETING" > out.txt; cat - >> out.txt'
      outputs: [out.txt]
"""


def test_the_commands_environment_directory_umask_and_streams_reach_its_apply(
    warm: Warm, tmp_path: Path
) -> None:
    root = tmp_path / "proj" / "sub"
    root.mkdir(parents=True)
    (root / "pipeline.yaml").write_text(STATEFUL)
    before = warm.served()
    res = warm.run(
        root,
        "apply",
        "pipeline.yaml",
        "-q",
        env={"GREETING": "h\u00e9llo $(id)", "RUNNER_STATE": str(tmp_path / "elsewhere")},
        preexec_fn=lambda: os.umask(0o077),
        input="from stdin?",
    )
    assert res.returncode == 0, res.stderr
    assert warm.served() == before + 1
    # the step's stdin is not the command's (commands never read runner's): the value only
    assert (root / "out.txt").read_text() == "h\u00e9llo $(id)|"
    assert (root / "out.txt").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "elsewhere").is_dir() and not (root / ".runner").exists()
    assert res.stdout.startswith("completed: ran 1 step")


SLOW = """\
runner: 1
name: slow
steps:
  a:
    uses: shell
    with: {run: "touch started; exec sleep 47.25", outputs: [started]}
"""


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"47.25"]:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _start_slow(warm: Warm, root: Path, server: bool) -> subprocess.Popen[str]:
    root.mkdir()
    (root / "pipeline.yaml").write_text(SLOW)
    env = dict(warm.env, RUNNER_SERVER="1" if server else "0")
    proc = subprocess.Popen(
        [sys.executable, str(warm.launcher), "apply", "pipeline.yaml"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not ((root / "started").exists() and _sleepers()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    return proc


def test_ctrl_c_cancels_the_apply_as_in_its_own_process(warm: Warm, tmp_path: Path) -> None:
    shown = []
    for server in (True, False):
        proc = _start_slow(warm, tmp_path / str(server), server)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        shown.append(_shown(subprocess.CompletedProcess([], proc.returncode, out, err)))
        deadline = time.monotonic() + 20
        while _sleepers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sleepers() == []
    assert shown[0] == shown[1]
    assert shown[0][0] != 0


def test_a_killed_command_stops_its_apply(warm: Warm, tmp_path: Path) -> None:
    proc = _start_slow(warm, tmp_path / "killed", server=True)
    assert _sleepers()
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while (_sleepers() or warm.wait_for_server()[0]["running"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers() == []
    assert warm.wait_for_server()[0]["running"] == 0


def _no_new_privs() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS, as a sandbox sets it


def test_a_confined_process_runs_its_apply_itself(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(STATEFUL)
    before = warm.served()
    res = warm.run(
        tmp_path, "apply", "pipeline.yaml", "-q", env={"GREETING": "x"}, preexec_fn=_no_new_privs
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out.txt").read_text() == "x|"
    assert warm.served() == before
    assert len(control.statuses(warm.folder)) == 1  # and it started none


def test_a_changed_import_directory_sends_commands_to_a_new_server(
    warm: Warm, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {"PYTHONPATH": str(extra)}  # another identity: a server of its own
    (tmp_path / "pipeline.yaml").write_text(STATEFUL)
    first = warm.run(tmp_path, "apply", "pipeline.yaml", "-q", env=env)
    assert first.returncode == 0, first.stderr
    warm.wait_for_server(2)
    served = warm.served()
    (extra / "newmodule.py").write_text("")  # a module no one imported: the server stays
    assert warm.run(tmp_path, "apply", "pipeline.yaml", "-q", env=env).returncode == 0
    assert warm.served() == served + 1
    stale = next(s["pid"] for s in control.statuses(warm.folder) if s["served"])
    # found before the installed httpx the server imported: a fresh process would import this
    (extra / "httpx.py").write_text("# shadows the installed httpx\n")
    res = warm.run(tmp_path, "apply", "pipeline.yaml", "-q", env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out.txt").read_text() == "|"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the stale one left; a new one took its socket
        now = {s["pid"]: s["served"] for s in control.statuses(warm.folder)}
        if len(now) == 2 and stale not in now:
            break
        time.sleep(0.05)
    assert len(now) == 2 and stale not in now
    assert sum(now.values()) == 0  # the refused command ran itself


PROBE_MODULE = "import os\nVALUE = os.environ.get('WARM_PROBE_VAR')\n"
PRELOAD_PROBE = """
import sys
from runner.warm import server
server.PRELOAD = ("warm_probe_module",)
from runner.steps import registry
registry.BUILTINS.clear()
reads = server.preload()
print(sorted((k.decode(), v and v.decode()) for k, v in reads.items() if k.startswith(b"WARM_")))
"""


def test_the_variables_the_servers_imports_read_are_recorded(tmp_path: Path) -> None:
    (tmp_path / "warm_probe_module.py").write_text(PROBE_MODULE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), WARM_PROBE_VAR="a", WARM_OTHER="b")
    res = subprocess.run(
        [sys.executable, "-c", PRELOAD_PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert res.stdout.strip() == "[('WARM_PROBE_VAR', 'a')]"


SECRET_PEEK = """\
runner: 1
name: peek
steps:
  peek:
    uses: shell
    sandbox: false
    with:
      run: |
        tr '\\0' '\\n' < /proc/$PPID/environ | grep -a -c SERVICE_TOKEN=. > found.txt || true
"""


def test_a_step_reading_its_runners_environment_finds_no_secret(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(textwrap.dedent(SECRET_PEEK))
    before = warm.served()
    token = "ghp_" + "0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P"
    res = warm.run(tmp_path, "apply", "pipeline.yaml", "-q", env={"SERVICE_TOKEN": token})
    assert res.returncode == 0, res.stderr
    assert warm.served() == before + 1
    assert (tmp_path / "found.txt").read_text().strip() == "0"


def test_a_server_stopped_mid_apply_finishes_it_then_leaves(warm: Warm, tmp_path: Path) -> None:
    proc = _start_slow(warm, tmp_path / "slow", server=True)
    (pid,) = (s["pid"] for s in control.statuses(warm.folder))
    stop = warm.run(tmp_path, "server", "stop", "--json")
    assert stop.returncode == 0, stop.stderr
    assert '"stopping": 1' in stop.stdout
    assert control.statuses(warm.folder) == []  # it takes no new command
    assert _alive(pid)  # while the apply it runs goes on
    for sleeper in _sleepers():
        os.kill(sleeper, signal.SIGTERM)  # the step ends (failed), so does the apply
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, (out, err)  # a step failed (docs/commands.md)
    assert "FAILED  a: command exited with -15" in err
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_an_idle_server_leaves_and_takes_its_socket(tmp_path: Path) -> None:
    w = Warm(tmp_path)
    w.env["RUNNER_SERVER_IDLE"] = "1"
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: w\nsteps:\n  a: {uses: hash, with: {value: 1}}\n"
    )
    try:
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        (status,) = w.wait_for_server()
        deadline = time.monotonic() + 30
        while _alive(status["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(status["pid"])
        assert not Path(str(status["socket"])).exists()
        shown = w.run(tmp_path, "server", "status")
        assert shown.stdout == "no warm server is running\n"
    finally:
        w.stop()


def test_a_set_up_a_server_said_it_cannot_serve_starts_none_for_an_hour(tmp_path: Path) -> None:
    from runner.warm import client

    w = Warm(tmp_path)
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: w\nsteps:\n  a: {uses: hash, with: {value: 1}}\n"
    )
    try:
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        (status,) = w.wait_for_server()
        w.stop()
        Path(w.folder).mkdir(mode=0o700)
        off = Path(str(status["socket"])).with_suffix(".off")
        off.write_text("the server could not start: ...\n")
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        time.sleep(1.0)  # a server started would have its lock by now
        assert not list(Path(w.folder).glob("*.lock")) and control.statuses(w.folder) == []
        old = time.time() - client.OFF_SECONDS - 5
        os.utime(off, (old, old))  # an hour on, it is tried again
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        assert w.wait_for_server()
    finally:
        w.stop()


def test_only_what_a_fresh_interpreter_would_import_otherwise_makes_a_server_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.warm.imported import Imported

    first, last = tmp_path / "first", tmp_path / "last"
    first.mkdir()
    last.mkdir()
    (last / "warm_probe_pkg.py").write_text("")
    monkeypatch.syspath_prepend(str(last))
    monkeypatch.syspath_prepend(str(first))  # first, then last, then the rest of the path
    import warm_probe_pkg  # noqa: F401 - imported from `last`

    try:
        snapshot = Imported()

        times = iter(range(1, 100))

        def touched(folder: Path) -> str | None:
            at = next(times)
            os.utime(folder, ns=(at, at))  # the folder changed, whatever the clock's grain
            return snapshot.changed()

        (first / "json").mkdir()  # a plain folder: a namespace portion at most
        assert touched(first) is None
        (first / "httpx").write_text("")  # no module suffix: not importable
        assert touched(first) is None
        (last / "other.py").write_text("")  # a module no one imported
        assert touched(last) is None
        (tmp_path / "later").mkdir()
        assert snapshot.changed() is None
        (first / "warm_probe_pkg.py").write_text("")  # found before the imported one
        assert touched(first) == str(first / "warm_probe_pkg.py")
        (first / "warm_probe_pkg.py").unlink()
        (first / "json" / "__init__.py").write_text("")  # now a package, before the stdlib's
        assert touched(first) == str(first / "json")
        (first / "json" / "__init__.py").unlink()
        (first / "extra.pth").write_text("/nowhere\n")  # site's start-up files
        assert touched(first) == str(first)
        (first / "extra.pth").unlink()
        assert touched(first) is None
        (last / "warm_probe_pkg.py").write_text("VALUE = 1\n")  # the imported file itself
        assert snapshot.changed() == str(last / "warm_probe_pkg.py")
    finally:
        sys.modules.pop("warm_probe_pkg", None)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _wait_state(pid: int, letter: str) -> None:
    deadline = time.monotonic() + 20
    while not _state(pid).strip().startswith(letter):
        assert time.monotonic() < deadline, (pid, _state(pid))
        time.sleep(0.02)


def test_ctrl_z_stops_the_apply_with_its_command_and_fg_continues_both(
    warm: Warm, tmp_path: Path
) -> None:
    proc = _start_slow(warm, tmp_path / "slow", server=True)
    server = next(s["pid"] for s in control.statuses(warm.folder) if s["running"])
    (apply,) = _children_of(server)
    proc.send_signal(signal.SIGTSTP)
    _wait_state(apply, "T")  # the apply stops first, then its command
    _wait_state(proc.pid, "T")
    proc.send_signal(signal.SIGCONT)  # what a shell's `fg` sends
    _wait_state(proc.pid, "S")
    _wait_state(apply, "S")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0 and _sleepers() == []


def test_no_server_starts_while_a_user_has_the_most_there_may_be(tmp_path: Path) -> None:
    from runner.warm import client

    w = Warm(tmp_path)
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: w\nsteps:\n  a: {uses: hash, with: {value: 1}}\n"
    )
    try:
        for k in range(client.MAX_SERVERS):  # other set-ups' sockets
            (Path(w.folder) / f"{k:016x}.sock").write_text("")
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        time.sleep(1.0)  # a server started would have its lock by now
        assert not list(Path(w.folder).glob("*.lock"))
        (Path(w.folder) / f"{0:016x}.sock").unlink()
        assert w.run(tmp_path, "apply", "p.yaml", "-q").returncode == 0
        assert w.wait_for_server()
    finally:
        w.stop()
