"""`runner gc` and provider batches (issue 41): the batches of the runs it deletes are forgotten
once they are over and the ledger holds each answer they gave, and counted in its report; a
live batch is kept whatever its run, and so is one holding an answer the ledger lacks. runner
runs in a subprocess against the loopback OpenAI batch double."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from tests.conftest import runner_bin
from tests.providers.openai_batch_server import OpenAIBatchServer
from tests.providers.test_batch_budget import _budget
from tests.providers.test_batch_mode import SECRET, _apply, _env, _project, write_pipeline


def _gc(root: Path, *args: str) -> dict[str, object]:
    out = subprocess.run(
        [*runner_bin(), "gc", *args, "--json"],
        cwd=root, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def _rows(root: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        return [tuple(r) for r in db.execute(sql)]
    finally:
        db.close()


def test_gc_forgets_the_batches_of_the_runs_it_deletes(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET) as server:
        assert isinstance(server, OpenAIBatchServer)
        pipeline = _project(tmp_path, server.url, 5, extra="batch_wait = 30")
        assert _apply(tmp_path).returncode == 0
        write_pipeline(pipeline, 10, batch=True, start=5)  # other elements: a second run
        assert _apply(tmp_path).returncode == 0
        first, second = _rows(tmp_path, "SELECT id, run_id FROM batches ORDER BY rowid")
        dry = _gc(tmp_path, "--keep-last", "1", "--dry-run")
        assert dry["batches_deleted"] == 1 and len(_rows(tmp_path, "SELECT id FROM batches")) == 2
        done = _gc(tmp_path, "--keep-last", "1")
        assert done["runs_deleted"] == [first[1]] and done["batches_deleted"] == 1
        assert _rows(tmp_path, "SELECT id FROM batches") == [(second[0],)]
        assert _rows(tmp_path, "SELECT DISTINCT batch_id FROM batch_items") == [(second[0],)]
        text = subprocess.run(
            [*runner_bin(), "gc", "--keep-last", "0"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        assert ", 1 provider batches" in text
        assert _rows(tmp_path, "SELECT id FROM batches") == []
        # What they answered is the ledger's: the pipeline's first elements again send nothing.
        write_pipeline(pipeline, 5, batch=True)
        again = _apply(tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        assert len(server.batches()) == 2 and server.count("POST", "/v1/chat/completions") == 0


def test_gc_keeps_a_live_batch_and_an_answer_the_ledger_lacks(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET, validate_s=120.0) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 20)
        _budget(tmp_path, 0.1)  # a batch of 9 is made, the run stops interrupted (exit 9)
        assert _apply(tmp_path).returncode == 9
        [(live, status)] = _rows(tmp_path, "SELECT id, status FROM batches")
        assert status == "submitted"
        done = _gc(tmp_path, "--keep-last", "0")
        assert len(done["runs_deleted"]) == 1  # type: ignore[arg-type]
        assert done["batches_deleted"] == 0
        assert _rows(tmp_path, "SELECT id FROM batches") == [(live,)]
    # A batch collected whose answer never reached the ledger (a run deleted before it took
    # it) holds the only copy of a paid answer: kept.
    db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
    try:
        db.execute("UPDATE batches SET status='collected'")
        db.execute("UPDATE batch_items SET status='answered', answer='{}'")
        db.commit()
    finally:
        db.close()
    assert _gc(tmp_path, "--keep-last", "0")["batches_deleted"] == 0
    assert _rows(tmp_path, "SELECT id FROM batches") == [(live,)]
