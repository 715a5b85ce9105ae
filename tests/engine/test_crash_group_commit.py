"""Crash safety of the grouped durability: an apply SIGKILLed inside the object store's group
sync -- its objects written, the journal's batch naming them not yet committed -- resumes to the
same result, and nothing the journal had committed names an object that is not in the store.

A real `runner apply` subprocess: a small driver wraps the store's group syncfs so the process
kills itself there (before the sync, or just after it, before the COMMIT that follows); the
journal batch is held open for the whole run so the group at the end is large enough to be
synced as one.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

N = 24

DRIVER = """
import os, signal, sys
from runner.state import batching, objects

real_syncfs = objects._syncfs
where = sys.argv[1]

def dying(root):
    if where == "after":
        real_syncfs(root)  # the objects are durable; the COMMIT that follows never happens
    os.kill(os.getpid(), signal.SIGKILL)

objects._syncfs = dying
held = batching.BatchedJournal.batch_commits
# One batch for the whole run: the group synced at its end holds every step's object.
batching.BatchedJournal.batch_commits = lambda self, max_age_s=0.05: held(self, 3600.0)
sys.argv = ["runner", "apply", "pipeline.yaml", "--json", "--quiet", "--state", sys.argv[2]]
from runner.surfaces.cli import main
main()
"""


def write_pipeline(root: Path) -> None:
    lines = ["runner: 1", "name: group", "steps:"]
    for i in range(N):  # distinct outputs: one new object each
        lines += [
            f"  s{i:02d}:",
            "    uses: shell",
            "    with:",
            f'      run: "head -c {100 + i} /dev/zero > out/s{i:02d}.bin"',
            f"      outputs: [out/s{i:02d}.bin]",
        ]
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "out").mkdir()


APPLY = [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", "--quiet"]


def apply(root: Path, state: Path) -> dict[str, object]:
    done = subprocess.run(
        [*APPLY, "--state", str(state)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def committed_files(state: Path) -> dict[str, str]:
    """Every output file a committed execution names, with its object's digest."""
    if not (state / "journal.db").exists():
        return {}
    files: dict[str, str] = {}
    with sqlite3.connect(state / "journal.db") as db:
        try:
            rows = db.execute("SELECT files FROM executions WHERE files IS NOT NULL").fetchall()
        except sqlite3.OperationalError:  # killed before the first migration
            return {}
    for (text,) in rows:
        files.update(json.loads(text))
    return files


def object_bytes(state: Path, digest: str) -> bytes:
    return (state / "objects" / digest[:2] / digest[2:]).read_bytes()


@pytest.mark.parametrize("where", ["before", "after"])
def test_sigkill_in_the_group_sync_then_resume(tmp_path: Path, where: str) -> None:
    root, state = tmp_path / "p", tmp_path / "state"
    root.mkdir()
    write_pipeline(root)
    killed = subprocess.run(
        [sys.executable, "-c", DRIVER, where, str(state)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    # Every step ran and its object was written; the batch naming them never committed.
    assert len(list(root.glob("out/*.bin"))) == N
    for digest in committed_files(state).values():  # (none, or rows of earlier commits)
        assert hashlib.sha256(object_bytes(state, digest)).hexdigest() == digest

    doc = apply(root, state)
    assert doc["exit_code"] == 0, json.dumps(doc)[:3000]
    files = committed_files(state)
    assert len(files) == N
    for rel, digest in files.items():
        data = object_bytes(state, digest)
        assert hashlib.sha256(data).hexdigest() == digest
        assert data == (root / rel).read_bytes() == b"\0" * (100 + int(rel[5:7]))
    verify = subprocess.run(
        [sys.executable, "-m", "runner", "verify", "--state", str(state), "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True, verify.stdout
    again = apply(root, state)
    assert again["summary"] == {"ran": 0, "cached": N, "skipped": 0, "failed": 0}
