"""How the differential oracle (tests/engine/test_reuse_oracle.py) drives runner beyond the CLI: one
cycle of `runner watch`'s loop, the provider calls actually sent, what a state holds."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.providers.fake import FakeProvider

from .oracle_project import Observed, Variant, cli, has_journal, journal, observe, read_events

Decisions = Mapping[str, tuple[str, str | None]]  # gate key -> decision, revise input
# (file, step, the key it is bound to) -> its text: an edit holds wherever its step's element
# has that key (it comes back with its inputs and follows its item: state/overrides.py)
Edits = Mapping[tuple[str, str, str], str]

# -- the provider calls actually sent (the fake provider's own entry point) ------------------

SENT: list[str] = []  # idempotency keys, as the calls table names them
_real_enter = FakeProvider._enter


async def _recording_enter(self: FakeProvider, prompt: str, key: str) -> None:
    SENT.append(key)
    await _real_enter(self, prompt, key)


@contextmanager
def recording_calls() -> Iterator[None]:
    FakeProvider._enter = _recording_enter  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeProvider._enter = _real_enter  # type: ignore[method-assign]


def object_path(state: Path, data: bytes) -> Path:
    """Where the object store keeps ``data``."""
    digest = hashlib.sha256(data).hexdigest()
    return state / "objects" / digest[:2] / digest[2:]


def state_contents(state: Path) -> dict[str, Any]:
    """What a state holds: its files other than the journal (by size and time), and the
    journal's rows (a journal left by a killed apply is checkpointed by whoever opens it next,
    which changes its file, not what it holds)."""
    if not state.exists():
        return {}
    out: dict[str, Any] = {
        str(p.relative_to(state)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in state.rglob("*")
        if p.is_file() and not p.name.startswith("journal.db")
    }
    if has_journal(state):
        db = journal(state)
        try:
            for table in ("runs", "executions", "calls", "decisions", "overrides", "events"):
                out[table] = db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        finally:
            db.close()
    return out


class ListReporter:
    """The engine's events, as the JSON lines `--events` writes."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, event: Any) -> None:
        self.events.append(json.loads(json.dumps(event.to_json(), default=str)))

    def close(self) -> None:
        pass


class WatchDriver:
    """`runner watch`'s loop body (runner/surfaces/watch.py ``Watcher.run``), one cycle at a time: the
    first run, then a cycle for what changed on disk since, as its file watcher would see it
    (content changes of the watched files; a decision while the run waits at a gate)."""

    def __init__(self, file: Path, state: Path, params: Mapping[str, str]) -> None:
        from runner.engine.run.apply import State
        from runner.surfaces.watch import Watcher, WatchOptions
        from runner.surfaces.watchset import WatchSet, sha256_or_none

        self.params = dict(params)
        self.cycles: list[Any] = []
        self.reporter = ListReporter()
        self.w = Watcher(
            file,
            WatchOptions(overrides=self.params, state_dir=state),
            on_cycle=self.cycles.append,
            reporter=self.reporter,
        )
        state.mkdir(parents=True, exist_ok=True)
        self.w._state = State.open(state)
        self.w.watch_set = WatchSet(
            root=file.parent, files=frozenset({self.w.file}), state_dir=state.resolve()
        )
        self.w.hashes = {self.w.file: sha256_or_none(self.w.file)}
        self.started = False

    def changes(self) -> list[str] | None:
        """What the next cycle is for: [] for the first run, None when nothing changed."""
        if not self.started:
            return []
        seen = set(self.w.watch_set.files) | set(self.w.watch_set.journal_paths())
        changed = self.w._content_changes(seen)
        if self.w._decided(seen):
            changed.append("journal.db")
        return changed or None

    def cycle(self, changed: list[str]) -> tuple[int, list[dict[str, Any]]]:
        """Run one cycle: its exit code and the engine's events."""
        self.started = True
        self.reporter.events = []
        before = len(self.cycles)

        async def one() -> None:
            task = self.w._start(changed)
            if task is not None:
                self.w._finished(await task)

        asyncio.run(one())
        done = self.cycles[before:]
        assert len(done) == 1 and done[0].error is None, done
        return done[0].exit_code, self.reporter.events

    def close(self) -> None:
        if self.w._state is not None:
            self.w._state.close()


# -- the reference: a from-scratch apply of the same sources ---------------------------------


def scratch_apply(
    root: Path, state: Path, file: str, v: Variant, *, decisions: Decisions, edits: Edits
) -> Observed:
    """Apply ``file`` in an empty ``state``, making each `runner edit` the user made whose key
    the run reaches and deciding each gate as it was decided (both by key), as often as the
    run asks."""
    for _ in range(8):
        events = root / "events.jsonl"
        events.unlink(missing_ok=True)
        args = ["apply", file, "--json", "--events", str(events), "--state", str(state)]
        res = cli(root, *args, *v.params())
        ref = observe(root, state, file, v.topic, res.exit_code, read_events(events))
        if _replay_edits(root, state, file, ref, edits):
            continue
        key = ref.keys.get(("review", None))
        if res.exit_code != 7 or key is None or key not in decisions:
            return ref
        decision, feedback = decisions[key]
        extra = ["--input", f"feedback={feedback}"] if feedback is not None else []
        assert ref.run_id is not None
        args = ["decide", "--no-resume", ref.run_id, "review", decision, *extra]
        res = cli(root, *args, "--state", str(state))
        assert res.exit_code == 0, res.stderr
    raise AssertionError("the scratch apply kept asking at the gate")


def _replay_edits(root: Path, state: Path, file: str, ref: Observed, edits: Edits) -> bool:
    made = False
    for (f, step, key), text in edits.items():
        slot = next((s for s, k in ref.keys.items() if s[0] == step and k == key), None)
        if f != file or slot is None or ref.actions.get(slot) == "edited":
            continue
        element = slot[1]
        src = root / "edit.txt"
        src.write_text(text, encoding="utf-8")
        extra = [] if element is None else ["--element", str(element)]
        assert ref.run_id is not None
        args = ["edit", ref.run_id, step, *extra, "--from", str(src), "--state", str(state)]
        res = cli(root, *args)
        assert res.exit_code == 0, res.stderr
        made = True
    return made
