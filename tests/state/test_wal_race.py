"""Two processes opening a new journal (or collections file) at once both get it: switching a
new SQLite file to WAL mode answers the loser "database is locked" at once, without the busy
timeout, and the second of two applies started together failed, reported as a damaged journal
(25 of 100 opens failed before the wait)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest


def _open_journal(state: str, results: Any) -> None:
    from runner.state.journal import Journal

    try:
        Journal.open(Path(state)).close()
        results.put("ok")
    except Exception as exc:  # the failure is the test's answer
        results.put(repr(exc))


def _open_collections(state: str, results: Any) -> None:
    from runner.state.collections import Collections

    try:
        Collections(Path(state)).close()
        results.put("ok")
    except Exception as exc:
        results.put(repr(exc))


@pytest.mark.parametrize("opener", [_open_journal, _open_collections])
def test_two_processes_open_a_new_file_at_once(tmp_path: Path, opener: Any) -> None:
    ctx = mp.get_context("fork")
    answers: list[str] = []
    for n in range(30):
        results = ctx.Queue()
        procs = [ctx.Process(target=opener, args=(str(tmp_path / f"s{n}"), results)) for _ in "ab"]
        for p in procs:
            p.start()
        answers += [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    assert answers == ["ok"] * 60, [a for a in answers if a != "ok"][:3]
