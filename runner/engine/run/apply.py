"""The library entry points the CLI (and the web page, and tests) call: apply, explain."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import Busy, DiskFull, StoreError
from ...pipeline.compiler import Plan, compile_pipeline
from ...state.journal import Journal
from ...state.objects import ObjectStore
from .events import Reporter
from .executor_config import read_executor_settings
from .interpreter import Interpreter
from .locate import state_dir_for as state_dir_for
from .options import ApplyOptions
from .outcomes import RunReport
from .runloop import bounded
from .runloop import run_async as run_async


@dataclass
class State:
    """An opened state directory: the journal and the object store."""

    dir: Path
    journal: Journal
    objects: ObjectStore

    @classmethod
    def open(cls, state_dir: Path, *, readonly: bool = False) -> State:
        journal = Journal.open(state_dir, readonly=readonly)
        return cls(state_dir, journal, ObjectStore(state_dir / "objects"))

    def close(self) -> None:
        self.journal.close()


class _LazyProviders:
    """Providers are configured only when a step asks for one (start-up time matters)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._access: Any = None

    def _get(self) -> Any:
        if self._access is None:
            from ...providers.config import load_access

            self._access = load_access(self.root, keep_clients=True)
        return self._access

    async def aclose(self) -> None:
        """Close the providers' connections, kept open for the run (one client per backend)."""
        if self._access is not None:
            await self._access.aclose()

    def get(self, name: str | None) -> Any:
        return self._get().get(name)

    def default_name(self) -> str:
        return str(self._get().default_name())


@contextlib.contextmanager
def item_lock(state: State, plan: Plan, item: str | None) -> Iterator[None]:
    """One active apply per (pipeline, item): a second one is refused, naming the active run."""
    from ...state.itemlock import try_hold

    with try_hold(state.dir, plan.name, item) as held:
        if not held:
            active = state.journal.active_runs(plan.name, item)
            running = [r for r in active if r["status"] == "running"]
            ident = f" (run {running[0]['id']})" if running else ""
            what = f"pipeline '{plan.name}'" + (f" for item '{item}'" if item else "")
            raise Busy(
                f"another apply of {what} is running{ident}",
                hint="wait for it to finish, or cancel it with: runner runs cancel RUN",
            )
        # Runs still marked running while we hold the lock belong to processes that died.
        stale = [
            r["id"] for r in state.journal.active_runs(plan.name, item) if r["status"] == "running"
        ]
        if stale:
            state.journal.mark_interrupted(stale)
        yield


def resolve_item(plan: Plan, item: str | None) -> str | None:
    if item is not None:
        return item
    if plan.item is None:
        return None
    from ... import expr as ex

    value = ex.evaluate_value(plan.item, {"params": plan.params})
    return None if value is None else str(value)


def apply_plan(
    plan: Plan,
    state: State,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
) -> RunReport:
    """Run ``plan`` to convergence against ``state``. Raises Busy when the item is locked,
    KeyboardInterrupt when SIGINT or SIGTERM cancelled it (the run is journaled cancelled)."""
    started: list[str] = []

    def force() -> None:  # the process ends now: the run must not stay `running`
        from ...state.interrupt import mark_cancelled_now

        if started:
            mark_cancelled_now(state.dir / "journal.db", started[0], "cancelled by the user")

    return run_async(
        apply_plan_async(plan, state, options, reporter, on_start=started.append), on_force=force
    )


async def apply_plan_async(
    plan: Plan,
    state: State,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
    *,
    on_start: Callable[[str], None] | None = None,
) -> RunReport:
    """The awaitable form of apply_plan (watch runs it in its own loop); ``on_start`` receives
    the run id before anything runs."""
    from .preflight import check_plan

    options = options or ApplyOptions()
    options.item = resolve_item(plan, options.item)
    # before anything runs or a person is asked
    check_plan(plan, state_dir=state.dir, outputs_found=options.outputs_found)
    # Where bodies run: runner.toml's [executor] under what the caller gave (a bad table or a
    # cluster option without dask is refused here, before anything runs).
    where = read_executor_settings(plan.root).overridden(
        options.executor, options.workers, options.threads, options.scheduler
    )
    if options.kind == "run" and any(s.uses == "image" for s in plan.steps.values()):
        options.kind = "hero"  # image runs are heroes unless `iterate` says otherwise
    # Shared with other applies, never with gc: objects this run reuses stay until recorded.
    with state.objects.in_use(), item_lock(state, plan, options.item):
        if options.resume_run_id is None and options.run_id is None and not options.dry_run:
            # A run suspended at a human gate or on a batch for this item continues (same id).
            waiting = [
                r
                for r in state.journal.active_runs(plan.name, options.item)
                if r["status"] in ("awaiting_human", "awaiting_batch")
            ]
            if waiting:
                options.resume_run_id = waiting[0]["id"]
        providers = _LazyProviders(plan.root)
        executor = None
        if where.kind == "dask":
            from .executors import DaskExecutor

            executor = await DaskExecutor.open(where.scheduler, where.workers, where.threads)
            if not options.jobs_given:
                options.jobs = await executor.slots()  # bodies in flight: the cluster's threads
        interpreter = Interpreter(
            plan,
            journal=state.journal,
            objects=state.objects,
            state_dir=state.dir,
            options=options,
            reporter=reporter,
            providers=providers,
        )
        interpreter.remote = remote_link(plan, state, options, interpreter.emit_warning)
        interpreter.executor = executor
        if on_start is not None:
            on_start(interpreter.run_id)
        try:
            report = await interpreter.apply()
        except DiskFull:
            raise  # the interpreter journaled what a full disk allows
        except Exception as exc:
            # An error the engine did not expect (a store it cannot read) ends the run failed
            # with it, not `running` until the next apply calls it interrupted.
            with contextlib.suppress(Exception):
                state.journal.mark_failed(interpreter.run_id, f"failed: {exc}")
            raise
        finally:
            # Bounded: a cancelled run ends within seconds even if a connection will not close.
            await bounded(providers.aclose())
            if executor is not None:
                await bounded(executor.close())
        if interpreter.remote is not None:
            report.remote = interpreter.remote.summary()
        return report


def remote_link(
    plan: Plan, state: State, options: ApplyOptions, warn: Callable[[str], None]
) -> Any:
    """The run's link to its remote cache (``--remote`` or [cache] in runner.toml), or None.

    Raises StoreError for a bad [cache] section."""
    if not options.remote and not _mentions_cache(plan.root):
        return None  # most projects: the remote cache's modules (hmac, fsspec's glue) stay out
    from ...state.remote import RemoteCache, cache_settings, read_cache_section, signing_key
    from .remote_link import RemoteLink

    section, where = read_cache_section(plan.root)
    if not (options.remote or section.get("remote")):
        return None
    settings = cache_settings(section, where)
    url = options.remote or settings.remote
    assert url is not None
    try:
        key = signing_key(settings, os.environ)
        cache = RemoteCache(url, writable=settings.writable, sign_key=key)
    except StoreError as exc:
        warn(f"remote cache unavailable, continuing locally: {exc.message}")
        return None
    roots = (str(plan.root.resolve()), str(state.dir.resolve()), str(Path.home()))
    return RemoteLink(
        cache, state.objects, push=settings.pushes_on_apply, warn=warn, local_roots=roots
    )


def _mentions_cache(root: Path) -> bool:
    """Whether the runner.toml above ``root`` could hold a [cache] table (the test
    state.remote.read_cache_section starts with)."""
    from ...source.tomlfile import find_runner_toml

    found = find_runner_toml(root)
    if found is None:
        return False
    try:
        return "cache" in found.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # read_cache_section says what is wrong with it


def apply_file(
    path: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    state_dir: Path | None = None,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
) -> RunReport:
    plan = compile_pipeline(path, overrides)
    state = State.open(state_dir or state_dir_for(path))
    try:
        return apply_plan(plan, state, options, reporter)
    finally:
        state.close()
