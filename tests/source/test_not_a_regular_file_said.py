"""A file runner reads that is not a regular file is refused and said for what it is (issue 40).

A `runner.toml` that is a FIFO or a directory was passed over without a word (and with it the
project's providers, budget and cache signing key); a template or a `read` file that is a FIFO
was said as "file not found". Real `runner` processes over a real FIFO and directory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import runner_bin

PIPELINE = """\
runner: 1
name: p
steps:
  t: {uses: template, with: {text: "hi"}}
"""


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), *args], cwd=root, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_runner_toml_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    toml = tmp_path / "runner.toml"
    if kind == "fifo":
        os.mkfifo(toml)
    else:
        toml.mkdir()
    for command in (("apply", "pipeline.yaml"), ("plan", "pipeline.yaml")):
        res = _run(tmp_path, *command)
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
        assert f"runner.toml is {what}, not a regular file" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    assert not (tmp_path / ".runner").exists()  # nothing ran without its settings


@pytest.mark.parametrize(
    ("step", "said"),
    [
        ("{uses: template, with: {template: t.j2}}", "template t.j2 is a FIFO (named pipe)"),
        ("{uses: read, with: {path: t.j2}}", "t.j2 is a FIFO (named pipe)"),
    ],
    ids=["template", "read"],
)
def test_a_fifo_named_as_a_file_is_said_not_regular_not_missing(
    tmp_path: Path, step: str, said: str
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "pipeline.yaml").write_text(f"runner: 1\nname: p\nsteps:\n  t: {step}\n")
    os.mkfifo(tmp_path / "t.j2")
    res = _run(tmp_path, "check", "pipeline.yaml")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{said}, not a regular file" in res.stderr, res.stderr
    assert "not found" not in res.stderr
