"""A file's signature cannot be fooled by its mtime (issue 44): a file rewritten in place with
the same size and its mtime set back (`cp -p`, `rsync -t --inplace`, archives with fixed mtimes)
is read again, by the file-hash cache and by the no-op fast path alike. Its ctime moved."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tests.conftest import Project
from tests.engine.test_fastpath import age_files, fast

READS = """\
runner: 1
name: sigs
steps:
  r:
    uses: shell
    with: {run: "cat data.txt > out.txt", inputs: [data.txt], outputs: [out.txt]}
"""


def _rewrite_keeping_mtime(path: Path, text: str) -> None:
    """Same size, same inode, the old mtime put back: only ctime tells."""
    st = os.stat(path)
    assert len(text.encode()) == st.st_size
    time.sleep(0.01)  # a ctime a clock tick later, on coarse clocks too
    with open(path, "r+b") as f:
        f.write(text.encode())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def _text(doc: dict[str, Any], project: Project) -> str:
    assert doc["_exit"] == 0, doc
    return (project.root / "out.txt").read_text(encoding="utf-8")


def test_a_same_size_rewrite_with_its_mtime_set_back_is_read_again(project: Project) -> None:
    project.write("pipeline.yaml", READS)
    project.write("data.txt", "old words\n")
    age_files(project.root)  # past the racily-clean window: the signature is trusted
    first = project.apply()
    assert first["_exit"] == 0 and _text(first, project) == "old words\n"
    _rewrite_keeping_mtime(project.root / "data.txt", "new words\n")
    second = project.apply()
    assert second["_exit"] == 0
    # today's main answered "old words": the hash cache trusted (size, mtime, inode)
    assert _text(second, project) == "new words\n"


def test_the_fast_path_sees_a_rewrite_with_its_mtime_set_back(project: Project) -> None:
    project.write("pipeline.yaml", READS)
    project.write("data.txt", "old words\n")
    project.apply()
    age_files(project.root)
    project.apply()  # re-hashes the aged file and records the fingerprint
    third = project.apply()
    assert fast(third, project)  # the fingerprint holds while nothing changed
    _rewrite_keeping_mtime(project.root / "data.txt", "new words\n")
    fourth = project.apply()
    assert not fast(fourth, project)
    assert _text(fourth, project) == "new words\n"


def test_the_pages_plan_of_a_run_follows_a_rewrite_with_its_mtime_set_back(
    project: Project,
) -> None:
    """The web page's compiled plan is cached by the pipeline file's signature: ctime in it."""
    from runner.engine.run.apply import State
    from runner.surfaces.web.service import run_plan

    project.write("pipeline.yaml", READS)
    project.write("data.txt", "old words\n")
    assert project.apply()["_exit"] == 0
    state = State.open(project.root / ".runner", readonly=True)
    try:
        run = {"pipeline_file": str(project.root / "pipeline.yaml"), "params": "{}"}
        plan, error = run_plan(state, run)
        assert error is None and list(plan.order) == ["r"]
        pipeline = project.root / "pipeline.yaml"
        _rewrite_keeping_mtime(
            pipeline, pipeline.read_text(encoding="utf-8").replace("  r:", "  q:")
        )
        plan, error = run_plan(state, run)
        assert error is None and list(plan.order) == ["q"]  # was the cached plan of the old file
    finally:
        state.close()


def test_a_run_trusts_a_digest_once_the_files_last_change_is_past_its_clock(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Within a run, a file whose last change is past the fine-grained window is hashed once
    (a fan-out's leaves all read their root's output); a file changed since is read again,
    even rewritten with the same size and its mtime put back; nothing of it is journaled."""
    from runner.engine.run import files
    from runner.state.filedigest import sha256_file

    reads: list[Path] = []

    def counted(p: Path) -> str:
        reads.append(p)
        return sha256_file(p)

    monkeypatch.setattr(files, "sha256_file", counted)
    hasher = files.FileHasher(None)
    path = tmp_path / "root.txt"
    path.write_text("old words\n")
    first = hasher.hash(path)
    assert hasher.hash(path) == first and len(reads) == 2  # just written: racily clean
    st = os.stat(path)
    if not files._fine_times(st):
        return  # whole-second times: only the journal's 2 s window applies
    time.sleep(files._RACY_FINE_NS / 1e9 * 1.5)
    hasher.hash(path)  # past the window: settled
    assert hasher.hash(path) == first and len(reads) == 3
    assert hasher.dirty == []  # (the journal keeps only what is past every clock's window)
    _rewrite_keeping_mtime(path, "new words\n")
    assert hasher.hash(path) != first and len(reads) == 4
