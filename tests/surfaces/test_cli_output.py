"""What people read in the terminal, pinned by snapshots: the report and classify workflows
through their gates, and the thumbnail view, at 80 columns, with stdout piped and on a TTY.

Each command runs as a real subprocess (``python -m runner``); on a TTY its stdout is a
pseudo-terminal. Run ids, clock times, durations and the project's path are replaced by
placeholders so a snapshot only changes when the output does.
"""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from tests.conftest import REPO

COLUMNS = 80
MODES = ("pipe", "tty")


def run(
    root: Path, mode: str, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``runner ARGS`` in ``root``; stdout is a pty on "tty"."""
    full_env = {
        **{
            k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLORTERM")
        },
        "COLUMNS": str(COLUMNS),
        "LINES": "40",
        "TERM": "xterm",
        "USER": "tester",
        **(env or {}),
    }
    cmd = [sys.executable, "-m", "runner", *args]
    if mode == "pipe":
        res = subprocess.run(
            cmd, cwd=root, env=full_env, capture_output=True, text=True, timeout=120
        )
        return res.returncode, res.stdout, res.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=root, env=full_env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    return code, b"".join(chunks).decode().replace("\r\n", "\n"), err


def normalise(text: str, root: Path) -> str:
    text = text.replace(str(root.resolve()), "<project>").replace(str(root), "<project>")
    text = re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "<run>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", "<when>", text)
    text = re.sub(r"\b\d\d:\d\d:\d\d\b", "<time>", text)  # a call's sent time
    text = re.sub(r"\d+\.\d\ds\b", "<t>s", text)
    return re.sub(r"\b[0-9a-f]{12}\b", "<key>", text)


class Session:
    """A shipped project and the transcript of the commands run in it."""

    def __init__(self, root: Path, mode: str) -> None:
        self.root, self.mode = root, mode
        self.transcript: list[str] = []
        self.run_ids: list[str] = []

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        code, out, err = run(self.root, self.mode, *args, env=env)
        self.run_ids += [
            r for r in re.findall(r"\d{8}-\d{6}-[0-9a-f]{6}", out) if r not in self.run_ids
        ]
        for line in out.splitlines():
            assert len(line) <= COLUMNS, f"wider than {COLUMNS} columns: {line!r}"
        shown = " ".join(args)
        self.transcript.append(
            f"$ runner {shown}\n{out}" + (f"[stderr]\n{err}" if err else "") + f"[exit {code}]\n"
        )
        return code, out

    def text(self) -> str:
        return normalise("\n".join(self.transcript), self.root)


@pytest.fixture
def session(tmp_path: Path, request: pytest.FixtureRequest) -> Session:
    for folder in ("pipelines", "prompts", "examples", "cards", "schemas"):
        shutil.copytree(
            REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns(".runner", "out")
        )
    return Session(tmp_path, request.param)


def _run_id(out: str) -> str:
    found = re.search(r"\(run (\d{8}-\d{6}-[0-9a-f]{6})\)", out)
    assert found, out
    return found.group(1)


@pytest.mark.parametrize("session", MODES, indirect=True)
def test_report_through_three_rounds(session: Session, snapshot: SnapshotAssertion) -> None:
    code, out = session("apply", "pipelines/report.yaml")
    assert code == 7 and "runner decide" in out
    run_id = _run_id(out)
    code, out = session(
        "decide",
        run_id,
        "review",
        "revise",
        "--input",
        "feedback=shorter",
        "--comment",
        "too long",
        "--by",
        "ana",
    )
    assert code == 7 and "round 2" in out
    (session.root / "input.json").write_text('{"tone": "plain", "keep": ["figures"]}')
    code, out = session(
        "decide", run_id, "review", "revise", "--input-file", "input.json", "--by", "bo"
    )
    assert code == 7 and "round 3" in out
    code, out = session(
        "decide", run_id, "review", "reject", "--comment", "not this quarter", "--by", "bo"
    )
    assert code == 8 and "FAILED" not in out and "not run: publish" in out
    code, out = session("show", run_id)
    assert code == 0
    code, out = session("runs", "decisions", run_id)
    assert code == 0
    assert session.text() == snapshot


@pytest.mark.parametrize("session", MODES, indirect=True)
def test_classify_approved_and_ingested(session: Session, snapshot: SnapshotAssertion) -> None:
    code, out = session("apply", "pipelines/classify-ingest.yaml")
    assert code == 7
    run_id = _run_id(out)
    code, out = session("decide", run_id, "review", "approve", "--by", "ana")
    assert code == 0 and "completed" in out
    code, out = session("show", run_id)
    assert session.text() == snapshot


@pytest.mark.parametrize("session", MODES, indirect=True)
def test_thumbnail_view(session: Session, snapshot: SnapshotAssertion) -> None:
    code, out = session("apply", "pipelines/thumbnail.yaml", "-p", "video_id=dQw4w9WgXcQ")
    assert code == 0
    run_id = _run_id(out)
    session("pick", run_id, "2")
    code, out = session("show", run_id)
    # each file is named as it opens from the working directory (issue 30: names relative to
    # the run folder did not open from where the user stands)
    named = re.findall(r"(\S*\.runner/runs/\S+\.(?:jpg|png))", out)
    assert named and all((session.root / n).is_file() for n in named), named
    assert session.text() == snapshot
