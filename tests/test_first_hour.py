"""The frictions a new user met in the first hour (issue 30), each shown gone through the CLI."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from .conftest import Project, runner_bin

NO_PROJECT_COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "x"),
    ("show", "x"),
    ("verify",),
    ("gc",),
    ("collections", "list"),
    ("serve",),
]


@pytest.mark.parametrize("args", NO_PROJECT_COMMANDS, ids=" ".join)
def test_no_project_says_what_was_looked_for_and_names_state(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    res = Project(tmp_path).cli(*args)
    assert res.exit_code == 2, res.stderr
    assert f"no runner.toml or .runner/ found in {tmp_path.resolve()}" in res.stderr
    assert "--state" in res.stderr
    assert "no journal at" not in res.stderr
    assert not (tmp_path / ".runner").exists()  # nothing was made where nothing belongs


def test_a_project_that_never_ran_says_so(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    res = proj.cli("runs", "list")
    assert "nothing has run here yet" in res.stderr, res.stderr


def _project_that_ran(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    proj.write("runner.toml", "[general]\ndefault_provider = 'fake'\n")
    proj.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: tiny
        steps:
          hello:
            uses: template
            with: {text: "hi", vars: {}}
        """,
    )
    assert proj.cli("apply", "pipeline.yaml", "-q").exit_code == 0
    return proj


def test_serve_on_a_busy_port_names_a_free_one_and_prints_no_url(tmp_path: Path) -> None:
    proj = _project_that_ran(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = subprocess.run(
            [*runner_bin(), "serve", "--port", str(port)],
            cwd=proj.root, capture_output=True, text=True, timeout=60,
        )
    assert res.returncode == 2, res.stderr
    m = re.fullmatch(rf"error: port {port} is in use; try --port (\d+)\n", res.stderr)
    assert m, res.stderr
    assert "http://" not in res.stderr + res.stdout  # no URL for a server that never listened
    with socket.socket() as probe:  # the suggested port is free
        probe.bind(("127.0.0.1", int(m.group(1))))


def test_serve_prints_its_url_once_listening(tmp_path: Path) -> None:
    proj = _project_that_ran(tmp_path)
    proc = subprocess.Popen(
        [*runner_bin(), "serve", "--port", "0"],
        cwd=proj.root, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line
        # The URL is printed after listen(): a connection made at once is accepted.
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
