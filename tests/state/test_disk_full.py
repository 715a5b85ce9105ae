"""Issue 16 point 10: the disk fills up while an apply records its work.

For real: the project lives on a small tmpfs (mounted by the test; root only, as in CI). The
apply stops with a clear error (no traceback), its run is marked interrupted (not left
`running`), every element recorded before it stays recorded, and after the project moves to a
bigger disk the next apply resumes: recorded elements are not run again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import runner_bin

N = 400

PIPE = f"""\
runner: 1
name: full
steps:
  make:
    uses: shell
    for_each: {list(range(N))}
    concurrency: 2
    with:
      run: "mkdir -p out && head -c 6000 /dev/urandom > out/e${{{{ item }}}}.bin"
      outputs: ["out/e${{{{ item }}}}.bin"]
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: the apply's output (400 x 6 KB, twice: files and objects) does not fit."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _apply(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json", "-q"],
        cwd=root, capture_output=True, text=True, check=False, timeout=600,
    )


def _completed(root: Path) -> set[int]:
    conn = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = conn.execute(
            "SELECT element FROM executions WHERE status='completed'"
        ).fetchall()
        return {r[0] for r in rows}
    finally:
        conn.close()


def test_disk_full_stops_cleanly_and_resumes_on_a_bigger_disk(
    small_disk: Path, tmp_path: Path
) -> None:
    (small_disk / "pipeline.yaml").write_text(PIPE, encoding="utf-8")
    res = _apply(small_disk)
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "disk" in res.stderr and "full" in res.stderr, res.stderr[-2000:]
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["exit_code"] == 1
    conn = sqlite3.connect(small_disk / ".runner" / "journal.db")
    try:
        runs = conn.execute("SELECT status, reason FROM runs").fetchall()
        running = conn.execute(
            "SELECT count(*) FROM executions WHERE status='running'"
        ).fetchone()[0]
    finally:
        conn.close()
    assert [r[0] for r in runs] == ["interrupted"] and "disk is full" in runs[0][1], runs
    assert running == 0
    recorded = _completed(small_disk)
    assert 0 < len(recorded) < N
    # every recorded element's output and object are whole
    for i in recorded:
        assert (small_disk / "out" / f"e{i}.bin").stat().st_size == 6000
    # a bigger disk: the same project copied, the next apply resumes
    bigger = tmp_path / "bigger"
    shutil.copytree(small_disk, bigger, symlinks=True)
    again = _apply(bigger)
    assert again.returncode == 0, again.stderr[-2000:]
    steps = json.loads(again.stdout)["steps"]
    assert steps[0]["status"] in ("ran", "partial", "cached", "completed"), steps
    assert _completed(bigger) >= set(range(N))
    conn = sqlite3.connect(bigger / ".runner" / "journal.db")
    try:
        reused = conn.execute(
            "SELECT count(*) FROM executions WHERE status='cached' AND run_id="
            "(SELECT id FROM runs ORDER BY created_at DESC LIMIT 1)"
        ).fetchone()[0]
    finally:
        conn.close()
    assert reused == len(recorded)  # what was recorded is not run again
    verify = subprocess.run(
        [*runner_bin(), "verify", "--json"], cwd=bigger, capture_output=True, text=True,
        check=False,
    )
    assert json.loads(verify.stdout)["ok"] is True, verify.stdout[-2000:]


LLM = """\
runner: 1
name: ask
steps:
  ask:
    uses: llm
    retries: 0
    with: {prompt: "say hi"}
    check: ["${{ steps.ask.output.text | length > 0 }}"]
"""


def _fill(directory: Path) -> None:
    """Write zeros into ``directory`` until its disk refuses (ENOSPC)."""
    chunk = b"\0" * 65536
    with open(directory / "filler", "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError:
                break
        with contextlib.suppress(OSError):
            for _ in range(64):  # the last page's tail
                f.write(b"\0" * 1024)


def _config(root: Path, url: str) -> None:
    (root / "runner.toml").write_text(
        '[general]\ndefault_provider = "openai"\n[providers.openai]\n'
        f'base_url = "{url}/v1"\nmodel = "m"\napi_key_env = "LLM_CRED_VAR"\n'
    )


def _apply_llm(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json", "-q"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "LLM_CRED_VAR": "sk-test"},
    )


@pytest.mark.parametrize("reply", ["refused", "answered"])
def test_disk_full_at_a_ledger_write_stops_the_run_at_once(
    small_disk: Path, tmp_path: Path, reply: str
) -> None:
    """The disk fills while a provider call is out. Refused (HTTP 400): the ledger's record of
    the failure, a write outside any batch, meets the full disk. Answered: the reply's object
    cannot be written, then the ledger's record of the paid result meets the full disk. The
    apply stops there with one clear message, its run marked interrupted (it was left
    `running` until the next apply), and the call's record is written whole on the space the
    journal kept aside: on a bigger disk the next apply finishes, an answered call reused from
    the ledger (never sent, never paid for, again)."""
    import re

    from tests.providers.openai_server import OpenAIServer
    from tests.providers.servers import Recorded, Reply

    (small_disk / "pipeline.yaml").write_text(LLM, encoding="utf-8")

    def fill_then_reply(rec: Recorded) -> Reply | None:
        # once the ledger holds the request as sent (its last write before the reply), the
        # disk fills: the next write meets a full disk
        seen = sqlite3.connect(small_disk / ".runner" / "journal.db")
        try:
            for _ in range(3000):
                row = seen.execute("SELECT attempts FROM calls").fetchone()
                if row and row[0]:
                    break
                time.sleep(0.01)
        finally:
            seen.close()
        _fill(small_disk)
        if reply == "refused":
            return Reply(
                400, {"error": {"message": "Invalid prompt", "type": "invalid_request_error"}}
            )
        return None  # the server's own answer

    # A first apply creates the journal; a reader then holds a snapshot open, so SQLite cannot
    # restart its write-ahead log over frames already written: every later write needs new
    # space on the disk.
    (small_disk / "first.yaml").write_text(
        "runner: 1\nname: first\nsteps:\n  a: {uses: shell, with: {run: 'true'}}\n"
    )
    subprocess.run([*runner_bin(), "apply", "first.yaml", "-q"], cwd=small_disk, check=True)
    reader = sqlite3.connect(small_disk / ".runner" / "journal.db")
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchone()
    with OpenAIServer() as server:
        chat = next(h for m, p, h in server.routes if p.pattern.endswith("/chat/completions$"))
        server.routes.insert(
            0,
            ("POST", re.compile("/v1/chat/completions$"), lambda r: fill_then_reply(r) or chat(r)),
        )
        _config(small_disk, server.url)
        res = _apply_llm(small_disk)
    reader.close()
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "bug" not in res.stderr, res.stderr[-3000:]
    assert "is full" in res.stderr and "marked interrupted" in res.stderr, res.stderr[-2000:]
    conn = sqlite3.connect(small_disk / ".runner" / "journal.db")
    try:
        runs = conn.execute("SELECT status, reason FROM runs WHERE pipeline='ask'").fetchall()
        calls = conn.execute("SELECT status, error, result FROM calls").fetchall()
        running = conn.execute("SELECT count(*) FROM executions WHERE status='running'")
        still_running = running.fetchone()[0]
    finally:
        conn.close()
    assert runs == [("interrupted", "interrupted: the disk is full")], runs
    assert still_running == 0
    [(status, error, result)] = calls
    if reply == "refused":  # the ledger write landed
        assert status == "failed" and "Invalid prompt" in error, res.stderr
    else:  # the paid answer is in the ledger though its object could not be written
        assert status == "completed" and json.loads(result)["text"], res.stderr
    (small_disk / "filler").unlink()
    bigger = tmp_path / "bigger"
    shutil.copytree(small_disk, bigger, symlinks=True)
    with OpenAIServer() as server:
        _config(bigger, server.url)
        again = _apply_llm(bigger)
        sent_again = server.count("POST", "/v1/chat/completions")
    assert again.returncode == 0, again.stderr[-2000:]
    assert sent_again == (1 if reply == "refused" else 0)
    if reply == "answered":
        doc = json.loads(again.stdout)
        shown = subprocess.run(
            [*runner_bin(), "runs", "show", doc["run"]["id"], "--json"],
            cwd=bigger,
            capture_output=True,
            text=True,
            check=True,
        )
        [execution] = json.loads(shown.stdout)["executions"]
        assert execution["output"]["text"] == json.loads(result)["text"]


@pytest.mark.parametrize("for_each", [True, False])
def test_a_full_disk_met_by_the_object_store_stops_the_run_not_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, for_each: bool
) -> None:
    """Which write meets a full disk first is a race on a real one: the object store's own
    DiskFull (a StoreError, so a RunnerError) was once taken as the step's failure, the run
    finished `failed` with an execution left `running`. Met at the third stored output here, the
    run stops and is marked interrupted, and the step is not recorded failed."""
    from runner.errors import DiskFull
    from runner.state.objects import ObjectStore
    from tests.conftest import Project

    project = Project(tmp_path)
    many = "    for_each: [0, 1, 2, 3, 4, 5]\n    concurrency: 2\n" if for_each else ""
    name = "s#-${{ index }}.txt" if for_each else "s#.txt"
    steps = "".join(
        f"  s{i}:\n    uses: shell\n{many}    with:\n"
        f"      run: \"mkdir -p out && echo {i} > out/{name.replace('#', str(i))}\"\n"
        f"      outputs: [\"out/{name.replace('#', str(i))}\"]\n"
        for i in range(4)
    )
    project.write("pipeline.yaml", "runner: 1\nname: objects\nsteps:\n" + steps)
    real = ObjectStore.put_file
    stored: list[object] = []

    def put_file(self: ObjectStore, source: object) -> str:
        stored.append(source)
        if len(stored) == 3:
            raise DiskFull("cannot store an output: [Errno 28] No space left on device")
        return real(self, source)  # type: ignore[arg-type]

    monkeypatch.setattr(ObjectStore, "put_file", put_file)
    doc = project.apply()
    assert doc["_exit"] == 1, doc["_stderr"]
    assert "full" in doc["_stderr"], doc["_stderr"]
    conn = sqlite3.connect(tmp_path / ".runner" / "journal.db")
    try:
        runs = conn.execute("SELECT status, reason FROM runs").fetchall()
        left = conn.execute(
            "SELECT status, count(*) FROM executions WHERE status IN ('running', 'failed') "
            "GROUP BY status"
        ).fetchall()
    finally:
        conn.close()
    assert [r[0] for r in runs] == ["interrupted"] and "disk is full" in runs[0][1], runs
    assert left == [], left


TINY = """\
runner: 1
name: tiny
steps:
  make: {uses: shell, with: {run: "echo hi > x.txt", outputs: [x.txt]}}
"""


@pytest.mark.parametrize("free_kib", [8, 16, 64, 128])
def test_a_disk_full_when_the_journal_is_created_is_said_full_not_damaged(
    small_disk: Path, free_kib: int
) -> None:
    """Issue 40: with a few KiB left, creating the journal failed with "disk I/O error" (its
    shared-memory file) or "cannot rollback" (the migration's rollback hid the full disk), and
    the apply said the journal was damaged and to repair it: room is what it needs."""
    (small_disk / "pipeline.yaml").write_text(TINY, encoding="utf-8")
    (small_disk / "runner.toml").write_text("", encoding="utf-8")
    fill = small_disk / "fill"
    with open(fill, "wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * (2 * 1024 * 1024 - free_kib * 1024))
    res = _apply(small_disk)
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "is full" in res.stderr and "damaged" not in res.stderr, res.stderr[-2000:]
    assert "verify --repair" not in res.stderr
    fill.unlink()
    again = _apply(small_disk)  # room again: the half-made journal is not in the way
    assert again.returncode == 0, again.stderr[-2000:]
