"""Steps' commands run sandboxed: inside the project they read only what their step declares and
write only its outputs; no network unless `network: true`; no view of runner's processes;
`sandbox: false` opts out. Real applies, real bubblewrap and Landlock (runner/expr/confined.py)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.expr.confined import status
from tests.conftest import Project

pytestmark = pytest.mark.skipif(
    not status().confines, reason=f"no sandbox on this machine: {status().note}"
)


def _pipeline(project: Project, steps: str) -> None:
    project.write("runner.toml", "")
    project.write("pipeline.yaml", "runner: 1\nname: boxed\nsteps:\n" + steps)


def _stdout(project: Project, doc: dict[str, Any]) -> str:
    """The first execution's standard output, as `runs show --json` has it."""
    shown = project.cli("runs", "show", doc["run"]["id"], "--json").json
    return str(shown["executions"][0]["output"]["stdout"])


def _failure(doc: dict[str, object], step: str) -> str:
    for s in doc["steps"]:  # type: ignore[attr-defined]
        if s["id"] == step:
            return str(s.get("reason") or s.get("error") or "")
    raise AssertionError(f"no step {step} in {doc}")


def test_an_undeclared_read_fails_naming_the_file_and_declaring_it_passes(project: Project) -> None:
    project.write("in.txt", "hello\n")
    project.write("notes.txt", "not declared\n")
    steps = """\
      join:
        uses: shell
        with:
          run: cat in.txt notes.txt > out/joined.txt
          inputs: [in.txt]
          outputs: [out/joined.txt]
    """
    _pipeline(project, steps)
    doc = project.apply()
    assert doc["_exit"] != 0
    reason = _failure(doc, "join")
    assert "notes.txt: Permission denied" in reason
    assert "refused reading notes.txt, not among the step's inputs: declare it in inputs:" in reason

    _pipeline(project, steps.replace("inputs: [in.txt]", "inputs: [in.txt, notes.txt]"))
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert (project.root / "out" / "joined.txt").read_text() == "hello\nnot declared\n"


def test_a_command_writes_only_its_declared_outputs(project: Project) -> None:
    _pipeline(
        project,
        """\
      scribble:
        uses: shell
        with:
          run: |
            echo changed > pipeline.yaml || echo "pipeline.yaml refused" >&2
            cat .runner/journal.db > /dev/null || echo "journal refused" >&2
            echo made > stray.txt
          outputs: [made.txt]
    """,
    )
    before = (project.root / "pipeline.yaml").read_bytes()
    doc = project.apply()
    reason = _failure(doc, "scribble")
    assert "pipeline.yaml refused" in reason or "journal refused" in reason
    assert (
        "refused writing pipeline.yaml, stray.txt, not among the step's outputs: declare them in "
        "outputs:" in reason
    )
    assert ".runner" not in reason.split("(the sandbox")[1]  # runner's own state: not to declare
    assert (project.root / "pipeline.yaml").read_bytes() == before
    assert not (project.root / "stray.txt").exists()
    # made.txt was made empty for the command (Landlock grants existing files only), and it
    # never wrote it: it is not left behind as if produced
    assert not (project.root / "made.txt").exists()


def test_an_output_is_written_through_a_temporary_file_beside_it(project: Project) -> None:
    project.write("in.txt", "x\n")
    _pipeline(
        project,
        """\
      atomic:
        uses: shell
        with:
          run: tr x y < in.txt > out/.partial && mv out/.partial out/final.txt && cat out/final.txt
          inputs: [in.txt]
          outputs: [out/final.txt]
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert (project.root / "out" / "final.txt").read_text() == "y\n"


def test_an_output_below_the_top_is_made_by_the_command_as_without_the_sandbox(
    project: Project,
) -> None:
    """An output in a directory is made by the command (its directory's grant lets it): no
    empty file stands there before it runs, as with `sandbox: false`; one at the project's top
    is made empty first (Landlock grants a file only once it exists) and written all the same."""
    _pipeline(
        project,
        """\
      below:
        uses: shell
        with:
          run: "test -e out/x.txt && echo there > out/x.txt || echo fresh > out/x.txt"
          outputs: [out/x.txt]
      top:
        uses: shell
        with:
          run: "echo top > top.txt"
          outputs: [top.txt]
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert (project.root / "out" / "x.txt").read_text() == "fresh\n"
    assert (project.root / "top.txt").read_text() == "top\n"


def test_an_output_the_command_does_not_write_is_said_not_produced(project: Project) -> None:
    _pipeline(
        project,
        """\
      lazy:
        uses: shell
        with:
          run: "true"
          outputs: [out/never.txt]
    """,
    )
    doc = project.apply()
    assert "declared output out/never.txt was not produced" in _failure(doc, "lazy")
    assert not (project.root / "out" / "never.txt").exists()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what each connection sends."""
    server = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                heard.append(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], heard
    server.close()


def test_no_network_unless_the_step_says_network_true(
    project: Project, listener: tuple[int, list[bytes]]
) -> None:
    port, heard = listener
    call = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3).sendall(b'hi')"
    step = f"""\
      call:
        uses: shell
        with:
          run: {json.dumps(f'{sys.executable} -c "{call}"')}
    """
    _pipeline(project, step)
    doc = project.apply()
    assert doc["_exit"] != 0
    assert "ConnectionRefusedError" in _failure(doc, "call") or "Permission" in _failure(
        doc, "call"
    )
    assert heard == []

    _pipeline(project, step.rstrip(" ") + "        network: true\n")
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert heard == [b"hi"]


def test_a_command_sees_no_process_of_runner_and_no_secret(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-to-be-seen-4211")
    me = os.getpid()  # this test's process is runner's (the CLI runs in it)
    _pipeline(
        project,
        f"""\
      snoop:
        uses: shell
        with:
          run: |
            test -e /proc/{me} && echo "runner visible" || echo "runner invisible"
            cat /proc/{me}/environ /proc/{me}/mem 2>/dev/null | head -c 100
            grep -ls sk-never-to-be-seen /proc/*/environ || echo "no secret"
            ls /proc | grep -c '^[0-9]' > out/count.txt
          outputs: [out/count.txt]
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    out = _stdout(project, doc)
    assert "runner invisible" in out
    assert "no secret" in out
    assert "sk-never" not in out
    if status().kind == "bubblewrap+landlock":  # its own pid namespace: a handful of processes
        assert int((project.root / "out" / "count.txt").read_text()) < 10


def test_a_command_given_a_secret_runs_with_no_other_beside_it(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.source import secretmask

    secret = "tok-only-for-the-holder-5521"
    monkeypatch.setenv("HOLDER_TOKEN", secret)
    # The snoop looks for the secret in every process's environment for 2 s: had the two run
    # side by side (`--jobs 2`, no edge between them), it would find the holder's.
    look = f"grep -ls {secret} /proc/[0-9]*/environ"
    _pipeline(
        project,
        f"""\
      holder:
        uses: shell
        with:
          run: sleep 1.5
          pass_env: [HOLDER_TOKEN]
      snoop:
        uses: shell
        with:
          run: |
            i=0
            while [ $i -lt 20 ]; do {look} && exit 0; sleep 0.1; i=$((i+1)); done
            echo "not seen"
    """,
    )
    try:
        doc = project.apply("--jobs", "2")
        assert doc["_exit"] == 0, doc["_stderr"]
        shown = project.cli("runs", "show", doc["run"]["id"], "--json").json
        out = {e["step_id"]: e["output"]["stdout"] for e in shown["executions"]}
        assert out["snoop"].strip() == "not seen", out
    finally:
        secretmask.forget()


def test_sandbox_false_opts_out_and_plan_says_so(project: Project) -> None:
    project.write("notes.txt", "read anyway\n")
    _pipeline(
        project,
        """\
      free:
        uses: shell
        sandbox: false
        with:
          run: cat notes.txt
    """,
    )
    shown = project.cli("plan", "pipeline.yaml")
    assert "free: runs unsandboxed (sandbox: false)" in shown.stdout
    planned = project.cli("plan", "pipeline.yaml", "--json").json
    assert planned["steps"][0]["sandbox"] is False
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert _stdout(project, doc) == "read anyway\n"


def test_an_exec_check_reads_its_steps_files_and_its_own_only(project: Project) -> None:
    project.write("in.txt", "a\n")
    project.write("expected.txt", "A\n")
    project.write("other.txt", "x\n")
    _pipeline(
        project,
        """\
      up:
        uses: shell
        with:
          run: tr a A < in.txt > out/up.txt
          inputs: [in.txt]
          outputs: [out/up.txt]
        check:
          - exec: {run: "cmp out/up.txt expected.txt", inputs: [expected.txt]}
          - exec: {run: "cat in.txt > /dev/null"}
          - exec: {run: "cat other.txt"}
    """,
    )
    doc = project.apply()
    reason = _failure(doc, "up")
    assert "cmp out/up.txt" not in reason  # the declared input and the step's output: read
    assert "cat in.txt" not in reason  # the step's own input: read
    assert "`cat other.txt` exited with 1" in reason
    assert "refused reading other.txt, not among the check's inputs" in reason


def test_scratch_tmpdir_is_the_commands_own_and_goes_away(project: Project) -> None:
    _pipeline(
        project,
        """\
      scratch:
        uses: shell
        with:
          run: echo kept > "$TMPDIR/work" && cat "$TMPDIR/work" && echo "$TMPDIR"
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    kept, where = _stdout(project, doc).splitlines()
    assert kept == "kept"
    assert not Path(where).exists()


def test_tools_of_a_virtual_environment_inside_the_project_run(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = project.root / ".venv"
    project.write(".venv/pyvenv.cfg", "home = /usr/bin\n")
    project.write(".venv/lib/greeting.txt", "from the venv\n")
    tool = project.write(".venv/bin/greet", f"#!/bin/sh\ncat {venv}/lib/greeting.txt\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{venv}/bin:{os.environ['PATH']}")
    _pipeline(project, "  hello:\n    uses: shell\n    with:\n      run: greet\n")
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert _stdout(project, doc) == "from the venv\n"


def _bin_without_bwrap(tmp_path: Path, fake_bwrap: str | None = None) -> str:
    """A PATH directory holding the tools the steps use, without bubblewrap (or a fake one)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "tr"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    if fake_bwrap is not None:
        fake = bin_dir / "bwrap"
        fake.write_text(fake_bwrap)
        fake.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize(
    ("fake", "said"),
    [
        (None, "bubblewrap (bwrap) is not installed"),
        (
            "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
            "bubblewrap could not make a sandbox here (bwrap: No permissions to create new namespace)",
        ),
    ],
    ids=["no-bwrap", "bwrap-refused"],
)
def test_without_bubblewrap_landlock_alone_confines_and_runner_says_so(
    tmp_path: Path, fake: str | None, said: str
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "runner.toml").write_text("")
    (root / "notes.txt").write_text("secret\n")
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: p\nsteps:\n  peek:\n    uses: shell\n    with:\n      run: cat notes.txt\n"
    )
    env = {**os.environ, "PATH": _bin_without_bwrap(tmp_path, fake)}
    done = subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert said in done.stderr
    assert "refused reading notes.txt" in done.stderr
    assert done.stderr.count(said) == 1  # once


def test_a_sandboxed_step_cannot_swap_a_project_directory_for_a_link(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    project.write("data/f.txt", "inside\n")
    _pipeline(
        project,
        f"""\
      swap:
        uses: shell
        with:
          run: rm -rf data && ln -s '{outside}' data
    """,
    )
    doc = project.apply()
    assert doc["_exit"] != 0
    assert "Permission denied" in _failure(doc, "swap")
    assert (project.root / "data").is_dir() and not (project.root / "data").is_symlink()
    assert (project.root / "data" / "f.txt").read_text() == "inside\n"


def test_plan_and_explain_show_the_script_as_it_runs(project: Project) -> None:
    _pipeline(
        project,
        """\
      greet:
        uses: shell
        with:
          run: echo ${{ params.who }} > out/greet.txt
          outputs: [out/greet.txt]
    """,
    )
    text = (project.root / "pipeline.yaml").read_text()
    (project.root / "pipeline.yaml").write_text(
        text.replace("steps:\n", "params:\n  who: {type: string, default: \"$(touch x)\"}\nsteps:\n")
    )
    shown = project.cli("explain", "pipeline.yaml")
    assert 'script: echo "${RUNNER_VALUE_1}" > out/greet.txt' in shown.stdout, shown.stdout
    planned = project.cli("plan", "pipeline.yaml", "--json").json
    assert planned["steps"][0]["script"] == 'echo "${RUNNER_VALUE_1}" > out/greet.txt'
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert (project.root / "out" / "greet.txt").read_text() == "$(touch x)\n"
    assert not (project.root / "x").exists()


def test_a_when_exec_refused_a_file_fails_its_step_rather_than_skip_it(project: Project) -> None:
    project.write("flag.txt", "on\n")
    steps = """\
      maybe:
        uses: shell
        when: {exec: {run: "grep -q on flag.txt"}}
        with:
          run: echo ran
    """
    _pipeline(project, steps)
    doc = project.apply()
    assert doc["steps"][0]["status"] == "failed"
    assert "refused reading flag.txt, not among the check's inputs" in _failure(doc, "maybe")

    _pipeline(project, steps.replace('flag.txt"}}', 'flag.txt", inputs: [flag.txt]}}'))
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    assert doc["steps"][0]["status"] == "ran"


def _confined_cat(root: Path) -> bytes:
    from runner.expr.confined import Confinement
    from runner.expr.shellrun import run_shell

    real = os.path.realpath(root)
    confine = Confinement(real, read=(f"{real}/in.txt",))
    done = asyncio.run(
        run_shell("cat in.txt", cwd=root, env={"PATH": os.environ["PATH"]}, confine=confine)
    )
    assert done.code == 0, done
    return done.stdout


def test_a_spawner_outlives_the_thread_that_started_it_and_is_replaced_when_gone(
    tmp_path: Path,
) -> None:
    from runner.expr import confined

    (tmp_path / "in.txt").write_text("x\n")
    confined._close_hosts()  # (a fresh spawner, started below from a thread that then ends)
    thread = threading.Thread(target=_confined_cat, args=(tmp_path,))
    thread.start()
    thread.join()
    assert _confined_cat(tmp_path) == b"x\n"
    for host in list(confined._hosts.values()):  # a spawner killed under runner's feet
        host.process.kill()
        host.process.wait()
    assert _confined_cat(tmp_path) == b"x\n"


def test_runner_killed_takes_its_commands_with_it(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "runner.toml").write_text("")
    marker = f"31.{os.getpid()}7"
    (root / "pipeline.yaml").write_text(
        f"runner: 1\nname: p\nsteps:\n  wait:\n    uses: shell\n    with:\n      run: sleep {marker}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running(marker), "the command never started"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(marker), "a command outlived runner's kill -9"


def _running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker.encode() in cmdline and state != "Z":
                found.append(int(entry.name))
    return found
