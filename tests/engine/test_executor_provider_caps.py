"""A provider's max_concurrency holds across a whole Dask cluster when a provider step type runs
on workers: one distributed Semaphore per provider (providers/limits.py ClusterGate). A real
LocalCluster of 2 worker processes x 2 threads and a loopback OpenAI-shaped server counting the
requests in flight; every call is in the shared journal's ledger (never paid twice)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.engine.run.apply import apply_file
from runner.engine.run.events import EventType, RecordingReporter
from runner.engine.run.options import ApplyOptions
from runner.steps.registry import default_registry
from tests.providers.loadserver import LoadServer
from tests.providers.worker_steps import LlmAnywhere

pytest.importorskip("distributed")

PIPELINE = """\
runner: 1
name: capped
steps:
  ask:
    uses: llm_anywhere
    for_each: "${{ [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] }}"
    with: {prompt: "say ${{ item }}"}
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^ok say"}}
"""


def test_a_providers_cap_holds_across_dask_workers(tmp_path: Path) -> None:
    default_registry().register(LlmAnywhere())
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    events = RecordingReporter()
    with LoadServer(delay=0.3) as server:
        (tmp_path / "runner.toml").write_text(
            '[general]\ndefault_provider = "openai"\n\n[providers.openai]\n'
            f'base_url = "{server.url}/v1"\nmodel = "test-chat"\nmax_concurrency = 2\n'
            "retry_base_delay = 0.01\n",
            encoding="utf-8",
        )
        report = apply_file(
            tmp_path / "pipeline.yaml",
            state_dir=tmp_path / ".runner",
            options=ApplyOptions(executor="dask", workers=2, threads=2),
            reporter=events,
        )
    assert report.exit_code == 0, report.reason
    assert server.served == 12
    # 4 worker threads could send 4 at once; the cluster-wide cap lets 2 through, and does
    # let 2 through (the calls did overlap)
    assert server.max_in_flight == 2
    workers = {e.data["worker"] for e in events.events if e.type is EventType.STEP_PASSED}
    assert len(workers) == 2  # both worker processes made calls
    db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
    try:
        calls = db.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall()
    finally:
        db.close()
    assert calls == [("completed", 12)]  # the workers kept the ledger in the shared journal
