"""A hand-built step environment: a real object store in tmp_path and an in-memory ledger."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.providers.config import Providers, load_config
from runner.state.objects import ObjectStore
from runner.steps.base import StepContext, StepEnv


class MemoryLedger:
    """The Ledger protocol over a dict; remembers the order of operations for assertions."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.ops: list[tuple[str, str]] = []

    def completed(self, key: str) -> dict[str, Any] | None:
        entry = self.entries.get(key)
        if entry and entry["status"] == "completed":
            return dict(entry["result"])
        return None

    def record(self, key: str) -> dict[str, Any] | None:
        entry = self.entries.get(key)
        return dict(entry) if entry else None

    def begin(self, key: str, meta: Mapping[str, Any]) -> None:
        self.ops.append(("begin", key))
        old = self.entries.get(key, {})
        self.entries[key] = {
            "status": "in_flight",
            "meta": dict(meta),
            "result": None,
            "remote_job": old.get("remote_job"),
            "attempts": old.get("attempts", 0),
            "submitted_at": old.get("submitted_at"),
            "remote_id": old.get("remote_id"),
        }

    def sent(self, key: str) -> None:
        self.ops.append(("sent", key))
        self.entries[key]["attempts"] += 1
        self.entries[key]["submitted_at"] = self.entries[key]["submitted_at"] or time.time()

    async def durable(self, *, stops: bool = True) -> None:
        return  # every entry is "committed" as it is made

    def remote_id(self, key: str, remote_id: str, *, durable: bool = True) -> None:
        self.ops.append(("remote_id", key))
        self.entries[key]["remote_id"] = remote_id

    def complete(self, key: str, result: Mapping[str, Any]) -> None:
        self.ops.append(("complete", key))
        self.entries[key]["status"] = "completed"
        self.entries[key]["result"] = dict(result)

    def fail(self, key: str, error: str, status: str = "failed") -> None:
        self.ops.append(("fail", key))
        self.entries[key]["status"] = status
        self.entries[key]["error"] = error

    def remote_job(self, key: str) -> dict[str, Any] | None:
        job = self.entries.get(key, {}).get("remote_job")
        return dict(job) if job else None

    def note_remote_job(self, key: str, job: Mapping[str, Any] | None) -> None:
        self.ops.append(("job", key))
        self.entries[key]["remote_job"] = dict(job) if job else None


def write_config(root: Path, text: str) -> Path:
    path = root / "runner.toml"
    path.write_text(text, encoding="utf-8")
    return path


def make_env(
    root: Path, config: str | None = None, environ: Mapping[str, str] | None = None
) -> StepEnv:
    """A StepEnv over ``root`` with providers configured by ``config`` (runner.toml text)."""
    root.mkdir(parents=True, exist_ok=True)
    path = write_config(root, config) if config is not None else None
    providers = Providers(load_config(path), environ=dict(environ or os.environ))
    return StepEnv(
        root=root,
        state_dir=root / ".runner",
        objects=ObjectStore(root / ".runner" / "objects"),
        providers=providers,
    )


def make_ctx(
    env: StepEnv,
    ledger: MemoryLedger | None = None,
    *,
    run_id: str = "run-1",
    feedback: list[str] | None = None,
    attempt: int = 1,
) -> StepContext:
    return StepContext(
        env=env,
        run_id=run_id,
        step_id="gen",
        attempt=attempt,
        feedback=list(feedback or []),
        ledger=ledger,
    )
