"""The image step over the real journal, set up as an apply sets it up: what is on disk when.

A key is committed in flight before its provider call, its completion is committed (with its
object durable) before its response reaches the call log, and a completed key is answered by
the ledger instead of the provider. Also: the fake draws during its delay without changing its
pictures or the order of its errors.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run.recorder import JournalLedger
from runner.errors import ProviderError, StepFailure
from runner.providers import ImageRequest, ImageResult, create
from runner.providers.calls import CallLog, Event
from runner.providers.fake import FakeProvider, _gradient, draw_image
from runner.source.redact import Redactor
from runner.state.journal import Journal
from runner.state.objects import ObjectStore
from runner.steps.base import StepContext, StepEnv, StepResult
from runner.steps.image import ImageStep


def _status(state: Path, key: str) -> str | None:
    """The calls row of ``key`` as another process would see it (committed rows only)."""
    with sqlite3.connect(state / "journal.db") as db:
        row = db.execute("SELECT status FROM calls WHERE key=?", (key,)).fetchone()
    return None if row is None else str(row[0])


class Watching(FakeProvider):
    """The fake, noting the committed ledger status of each key at the moment it is called."""

    def __init__(self, state: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.seen: dict[str, str | None] = {}

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        self.seen[request.idempotency_key] = _status(self.state, request.idempotency_key)
        return await super().generate_image(request)


class CheckingLedger(JournalLedger):
    """The engine's ledger, checking at each completion that the call log has no response yet."""

    def __init__(self, journal: Journal, run_id: str, log_dir: Path) -> None:
        super().__init__(journal, run_id, "gen")
        self.log_dir = log_dir
        self.early: list[str] = []

    def complete(self, key: str, result: Mapping[str, Any]) -> None:
        out = self.log_dir / f"{key}.out"
        if out.exists() and "response" in out.read_text(encoding="utf-8"):
            self.early.append(key)
        super().complete(key, result)


class Access:
    def __init__(self, provider: FakeProvider) -> None:
        self.provider = provider

    def get(self, name: str | None) -> FakeProvider:
        return self.provider

    def default_name(self) -> str:
        return self.provider.name


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    journal = Journal.open(tmp_path / "state")
    yield journal
    journal.close()


def _apply_step(
    journal: Journal, provider: FakeProvider, run_id: str, args: dict[str, Any]
) -> tuple[StepResult, CheckingLedger]:
    """One image step inside the apply's setup: batched commits, objects synced pre-commit."""
    state = journal.path.parent
    objects = ObjectStore(state / "objects")
    journal.create_run({"id": run_id, "pipeline": "p", "status": "running", "created_at": 0.0})
    env = StepEnv(root=state.parent, state_dir=state, objects=objects, providers=Access(provider))
    ctx = StepContext(env=env, run_id=run_id, step_id="gen")
    ledger = CheckingLedger(journal, run_id, ctx.log_dir)
    ctx.ledger = ledger
    journal.batch_commits()
    objects.defer_sync()
    journal.before_commit = objects.sync
    try:
        result = asyncio.run(ImageStep().run(ctx, args))
    finally:
        journal.end_batch()
        journal.before_commit = None
        objects.stop_deferring()
    return result, ledger


def test_in_flight_before_the_call_completed_before_the_log_and_never_called_again(
    journal: Journal,
) -> None:
    state = journal.path.parent
    provider = Watching(state, settings={"max_concurrency": 8})
    args = {"prompt": "a harbour", "n": 12, "size": "24x16", "concurrency": 8}
    first, ledger = _apply_step(journal, provider, "run-1", args)
    keys = [it["idempotency_key"] for it in first.output["iterations"]]
    assert first.output["completed"] == 12 and provider.calls == 12
    assert provider.seen == dict.fromkeys(keys, "in_flight")
    assert ledger.early == []
    for it in first.output["iterations"]:
        assert _status(state, it["idempotency_key"]) == "completed"
        assert ObjectStore(state / "objects").verify(it["raw"])
        log = (state / "logs" / "runs" / "run-1" / f"{it['idempotency_key']}.out").read_text()
        assert [line.split('"event": "')[1].split('"')[0] for line in log.splitlines()] == [
            "request",
            "response",
        ]

    again = Watching(state, settings={"max_concurrency": 8})
    second, _ = _apply_step(journal, again, "run-2", args)
    assert again.calls == 0 and again.seen == {}
    assert [it["raw"] for it in second.output["iterations"]] == list(first.artifacts)
    assert second.report is not None
    assert len(second.report["reused_calls"]) == len(second.output["iterations"])


def test_a_garbled_reply_is_failed_in_the_ledger_not_completed(journal: Journal) -> None:
    class Garbling(FakeProvider):
        async def generate_image(self, request: ImageRequest) -> ImageResult:
            result = await super().generate_image(request)
            return ImageResult(image=result.image[: len(result.image) // 2])

    with pytest.raises(StepFailure, match="unusable"):
        _apply_step(journal, Garbling(), "run-1", {"prompt": "x", "n": 2, "size": "8x8"})
    rows = journal.query("SELECT status, error FROM calls")
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("unusable" in r["error"] and "truncated" in r["error"] for r in rows)


def test_call_log_redacts_events_formatted_in_a_worker_thread(tmp_path: Path) -> None:
    secret = "sk-test-1234567890abcdef"
    log = CallLog(tmp_path / "logs", "k1", Redactor([secret]))
    events = (Event("request", {"prompt": f"key {secret}"}), Event("response", {"ok": True}))
    worker = threading.Thread(target=log.write_out, args=events)
    worker.start()
    worker.join()
    text = (tmp_path / "logs" / "k1.out").read_text(encoding="utf-8")
    assert secret not in text and "key ***" in text
    assert text.index('"request"') < text.index('"response"')
    assert not (tmp_path / "logs" / "k1.err").exists()


def test_fake_pictures_do_not_depend_on_warm_caches_or_threads() -> None:
    args = ("a red fox", 5, (48, 40), [])
    _gradient.cache_clear()
    cold = draw_image(*args)
    found: list[bytes] = []
    worker = threading.Thread(target=lambda: found.append(draw_image(*args)))
    worker.start()
    worker.join()
    assert found == [cold] and draw_image(*args) == cold


def test_fake_errors_keep_their_order_while_it_draws_during_the_delay() -> None:
    fake = create("fake", {"delay_ms": 20})
    bad_size = ImageRequest(prompt="[[FAIL_PERMANENT]]", size=(0, 10), seed=1)
    with pytest.raises(ProviderError, match=r"FAIL_PERMANENT"):
        asyncio.run(fake.generate_image(bad_size))
    with pytest.raises(ProviderError, match=r"outside 1\.\.4096"):
        asyncio.run(fake.generate_image(ImageRequest(prompt="p", size=(0, 10), seed=1)))
    flaky = ImageRequest(prompt="[[FAIL_TRANSIENT:1]]", size=(8, 8), seed=1, idempotency_key="k")
    with pytest.raises(ProviderError, match="transient failure 1 of 1"):
        asyncio.run(fake.generate_image(flaky))
    assert asyncio.run(fake.generate_image(flaky)).image.startswith(b"\x89PNG")
