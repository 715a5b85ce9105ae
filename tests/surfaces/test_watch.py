"""`runner watch` end to end: a real subprocess, real files, real inotify events."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LINE_TIMEOUT = 15.0
QUIET = 1.5  # how long "nothing happens" is watched for

PIPELINE = """\
runner: 1
name: w
steps:
  a:
    uses: template
    with: {template: prompts/a.j2, vars: {x: 1}}
  b:
    uses: template
    with: {text: "B {{ up }}", vars: {up: "${{ steps.a.output.text }}"}}
  c:
    uses: shell
    with:
      run: "if grep -q slow data/in.txt; then sleep 30; fi; cat data/in.txt > data/c.out"
      inputs: [data/in.txt]
      outputs: [data/c.out]
  d:
    uses: shell
    with: {run: "wc -c < data/c.out", inputs: [data/c.out]}
    needs: [c]
"""


class WatchProcess:
    """``python -m runner watch FILE --json`` with its stdout lines read by a thread."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.root = root
        self.events = root / "events.jsonl"
        self.stderr = open(root / "stderr.txt", "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner",
                "watch",
                "pipeline.yaml",
                "--json",
                "--events",
                str(self.events),
                *extra,
            ],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def cycle(self, timeout: float = LINE_TIMEOUT) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no cycle within {timeout}s; stderr: {self.err()}") from None
        doc: dict[str, Any] = json.loads(line)
        return doc

    def quiet(self, seconds: float = QUIET) -> None:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected cycle: {line}")

    def err(self) -> str:
        self.stderr.flush()
        return (self.root / "stderr.txt").read_text(encoding="utf-8")

    def mark(self) -> int:
        """The number of events so far (``started`` looks only at later ones)."""
        if not self.events.exists():
            return 0
        return len(self.events.read_text(encoding="utf-8").splitlines())

    def started(self, step: str, after: int, timeout: float = LINE_TIMEOUT) -> None:
        """Wait until the events file says ``step`` started (in an event after ``after``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.events.exists():
                lines = self.events.read_text(encoding="utf-8").splitlines()[after:]
                for line in lines:
                    ev = json.loads(line)
                    if ev["type"] == "StepStarted" and ev["step"] == step:
                        return
            time.sleep(0.05)
        raise AssertionError(f"step {step} never started")

    def interrupt(self, timeout: float = 5.0) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "prompts" / "a.j2").write_text("hello {{ x }}\n", encoding="utf-8")
    (tmp_path / "data" / "in.txt").write_text("fast\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def watching(workspace: Path) -> Iterator[WatchProcess]:
    w = WatchProcess(workspace)
    try:
        first = w.cycle()
        assert first["cycle"] == 1 and first["changed"] == [] and first["error"] is None
        assert sorted(first["ran"]) == ["a", "b", "c", "d"]
        assert first["run"]["status"] == "completed"
        yield w
    finally:
        w.close()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def test_an_edit_reruns_only_its_step_and_downstream(watching: WatchProcess) -> None:
    root = watching.root
    (root / "prompts" / "a.j2").write_text("hello again {{ x }}\n", encoding="utf-8")
    c = watching.cycle()
    assert c["cycle"] == 2 and c["changed"] == ["prompts/a.j2"]
    assert sorted(c["ran"]) == ["a", "b"]
    assert c["summary"] == {"ran": 2, "cached": 2, "skipped": 0, "failed": 0}
    assert c["duration_s"] >= 0 and c["exit_code"] == 0

    (root / "data" / "in.txt").write_text("fast, changed\n", encoding="utf-8")
    c = watching.cycle()
    assert c["changed"] == ["data/in.txt"] and sorted(c["ran"]) == ["c", "d"]


def test_touch_output_write_and_editor_junk_start_nothing(watching: WatchProcess) -> None:
    root = watching.root
    (root / "prompts" / "a.j2").touch()
    os.utime(root / "data" / "in.txt", (time.time() + 5, time.time() + 5))
    # A declared output, also read by a downstream step: writing it must not loop.
    (root / "data" / "c.out").write_text("tampered\n", encoding="utf-8")
    # vim: a write-test file, a backup that is written then removed, a swap file.
    for name in ("4913", "a.j2~", ".a.j2.swp", ".#a.j2"):
        (root / "prompts" / name).write_text("x", encoding="utf-8")
    for name in ("4913", "a.j2~", ".a.j2.swp", ".#a.j2"):
        (root / "prompts" / name).unlink()
    (root / "unrelated.txt").write_text("not read by the pipeline", encoding="utf-8")
    watching.quiet()

    # The same content written back through a rename is no change either.
    _atomic_write(root / "prompts" / "a.j2", "hello {{ x }}\n")
    watching.quiet(0.8)


def test_atomic_and_vim_style_saves_give_one_cycle(watching: WatchProcess) -> None:
    root = watching.root
    _atomic_write(root / "prompts" / "a.j2", "atomic {{ x }}\n")
    c = watching.cycle()
    assert c["changed"] == ["prompts/a.j2"] and sorted(c["ran"]) == ["a", "b"]
    watching.quiet(0.8)

    # vim's default save: probe file, rename the original to a backup, write, drop the backup.
    target = root / "prompts" / "a.j2"
    probe = root / "prompts" / "4913"
    probe.write_text("", encoding="utf-8")
    probe.unlink()
    os.rename(target, root / "prompts" / "a.j2~")
    target.write_text("vim {{ x }}\n", encoding="utf-8")
    (root / "prompts" / "a.j2~").unlink()
    c = watching.cycle()
    assert c["changed"] == ["prompts/a.j2"] and c["error"] is None
    assert sorted(c["ran"]) == ["a", "b"]
    watching.quiet(0.8)


def test_a_burst_of_saves_is_one_cycle(watching: WatchProcess) -> None:
    target = watching.root / "prompts" / "a.j2"
    for i in range(20):
        target.write_text(f"burst {i} {{{{ x }}}}\n", encoding="utf-8")
        time.sleep(0.005)
    c = watching.cycle()
    assert c["changed"] == ["prompts/a.j2"] and sorted(c["ran"]) == ["a", "b"]
    assert c["run"]["status"] == "completed"
    watching.quiet()


def test_invalid_edit_reports_and_keeps_watching(watching: WatchProcess) -> None:
    pipeline = watching.root / "pipeline.yaml"
    pipeline.write_text("runner: 1\nname: w\nsteps: [unclosed\n", encoding="utf-8")
    c = watching.cycle()
    assert c["changed"] == ["pipeline.yaml"] and c["run"] is None and c["ran"] == []
    assert c["exit_code"] == 2
    assert "pipeline.yaml:" in c["error"]
    where = c["error"].split(": ", 1)[0]
    assert where.count(":") == 2 and all(p.isdigit() for p in where.split(":")[1:]), c["error"]
    assert watching.proc.poll() is None

    # Still watching the last good pipeline's files: an input edit recompiles, fails again.
    (watching.root / "prompts" / "a.j2").write_text("while broken {{ x }}\n", encoding="utf-8")
    c = watching.cycle()
    assert c["changed"] == ["prompts/a.j2"] and c["error"] is not None

    pipeline.write_text(PIPELINE.replace('"B {{ up }}"', '"B2 {{ up }}"'), encoding="utf-8")
    c = watching.cycle()
    assert c["error"] is None and c["run"]["status"] == "completed"
    assert sorted(c["ran"]) == ["a", "b"]  # a: the template edited meanwhile; b: new text


def test_a_newly_referenced_file_is_watched(watching: WatchProcess) -> None:
    root = watching.root
    (root / "extra").mkdir()
    (root / "extra" / "e.txt").write_text("one\n", encoding="utf-8")
    step_e = '  e:\n    uses: shell\n    with: {run: "cat extra/e.txt", inputs: [extra/e.txt]}\n'
    doc = PIPELINE + step_e
    (root / "pipeline.yaml").write_text(doc, encoding="utf-8")
    c = watching.cycle()
    assert c["ran"] == ["e"]
    (root / "extra" / "e.txt").write_text("two\n", encoding="utf-8")
    c = watching.cycle()
    assert c["changed"] == ["extra/e.txt"] and c["ran"] == ["e"]


def test_a_change_during_a_run_cancels_it_and_starts_over(watching: WatchProcess) -> None:
    data = watching.root / "data" / "in.txt"
    mark = watching.mark()
    data.write_text("slow\n", encoding="utf-8")
    watching.started("c", mark)
    time.sleep(0.3)
    data.write_text("fast again\n", encoding="utf-8")
    stale = watching.cycle()
    assert stale["run"]["status"] == "cancelled" and stale["exit_code"] == 130
    fresh = watching.cycle()
    assert fresh["changed"] == ["data/in.txt"] and fresh["run"]["status"] == "completed"
    assert sorted(fresh["ran"]) == ["c", "d"]
    assert watching.interrupt() in (0, 130)


def test_no_interrupt_queues_the_next_cycle(workspace: Path) -> None:
    (workspace / "pipeline.yaml").write_text(
        PIPELINE.replace("sleep 30", "sleep 1.5"), encoding="utf-8"
    )
    w = WatchProcess(workspace, "--no-interrupt")
    try:
        assert w.cycle()["cycle"] == 1
        data = workspace / "data" / "in.txt"
        mark = w.mark()
        data.write_text("slow\n", encoding="utf-8")
        w.started("c", mark)
        data.write_text("fast again\n", encoding="utf-8")
        first = w.cycle()
        assert first["run"]["status"] == "completed" and sorted(first["ran"]) == ["c", "d"]
        second = w.cycle()
        # c read the newer content after its sleep, so d sees no change now: c runs alone.
        assert second["changed"] == ["data/in.txt"] and second["ran"] == ["c"]
    finally:
        w.close()


def test_ctrl_c_during_a_run_exits_cleanly(watching: WatchProcess) -> None:
    mark = watching.mark()
    (watching.root / "data" / "in.txt").write_text("slow\n", encoding="utf-8")
    watching.started("c", mark)
    t0 = time.monotonic()
    code = watching.interrupt()
    assert code in (0, 130) and time.monotonic() - t0 < 5
    last = watching.cycle(timeout=1)
    assert last["run"]["status"] == "cancelled"
    db = sqlite3.connect(watching.root / ".runner" / "journal.db")
    try:
        statuses = dict(db.execute("SELECT id, status FROM runs").fetchall())
        running = db.execute("SELECT COUNT(*) FROM executions WHERE status = 'running'").fetchone()
    finally:
        db.close()
    assert statuses[last["run"]["id"]] == "cancelled"
    assert "running" not in statuses.values() and running == (0,)


def test_ctrl_c_when_idle_exits_zero(watching: WatchProcess) -> None:
    assert watching.interrupt() == 0


GATED = """\
runner: 1
name: gated
steps:
  draft:
    uses: shell
    with: {run: "cat data/in.txt", inputs: [data/in.txt]}
  review:
    uses: human_gate
    with: {summary: "Publish?", show: {draft: "${{ steps.draft.output.stdout }}"}}
  publish:
    uses: shell
    needs: [review]
    with: {run: "echo published"}
"""


def test_a_decision_resumes_a_run_awaiting_a_human(workspace: Path) -> None:
    (workspace / "pipeline.yaml").write_text(GATED, encoding="utf-8")
    w = WatchProcess(workspace)
    try:
        first = w.cycle()
        assert first["run"]["status"] == "awaiting_human" and first["exit_code"] == 7
        assert first["ran"] == ["draft"]
        decided = subprocess.run(
            [
                sys.executable,
                "-m",
                "runner",
                "decide",
                "--no-resume",
                first["run"]["id"],
                "review",
                "approve",
                "--state",
                ".runner",
                "--by",
                "tester",
            ],
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert decided.returncode == 0, decided.stderr
        second = w.cycle()
        assert second["changed"] == [".runner/journal.db"]
        assert second["run"]["id"] == first["run"]["id"]  # the suspended run continues
        assert second["run"]["status"] == "completed" and "publish" in second["ran"]
        w.quiet(1.0)  # its own journal writes do not start another cycle
    finally:
        w.close()


def test_a_watch_run_journals_the_steps_it_reuses_and_gc_keeps_them(
    watching: WatchProcess,
) -> None:
    """Issue 28: a cycle answered steps from the last cycle without journaling them: the run
    left them out (runs show, the page), and gc --keep-last 1 deleted their results."""
    root = watching.root
    (root / "data" / "in.txt").write_text("fast, changed\n", encoding="utf-8")
    c = watching.cycle()
    assert c["changed"] == ["data/in.txt"] and sorted(c["ran"]) == ["c", "d"]
    run_id = c["run"]["id"]
    assert watching.interrupt() == 0

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "runner", *args], cwd=root, capture_output=True, text=True
        )

    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    by_step = {e["step_id"]: e for e in shown["executions"]}
    assert set(by_step) == {"a", "b", "c", "d"}, by_step
    assert by_step["b"]["output"]["text"] == "B hello 1\n"
    assert cli("gc", "--keep-last", "1").returncode == 0
    plan = json.loads(cli("plan", "pipeline.yaml", "--json").stdout)
    assert {s["id"]: s["action"] for s in plan["steps"]} == dict.fromkeys("abcd", "cached")


def test_a_computed_include_is_watched_once_a_render_read_it(workspace: Path) -> None:
    """A file a template includes by a computed name is known only once a render read it
    (recorded reads, issue 44): from then on, editing it is a change like any input's."""
    (workspace / "prompts" / "a.j2").write_text(
        'hello {% include "prompts/part_" ~ x ~ ".j2" %}\n', encoding="utf-8"
    )
    part = workspace / "prompts" / "part_1.j2"
    part.write_text("one", encoding="utf-8")
    w = WatchProcess(workspace)
    try:
        first = w.cycle()
        assert first["error"] is None and "a" in first["ran"], first
        part.write_text("uno", encoding="utf-8")
        c = w.cycle()
        assert c["changed"] == ["prompts/part_1.j2"] and "a" in c["ran"], c
    finally:
        w.close()
