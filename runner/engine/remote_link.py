"""The interpreter's link to a remote cache: look a key up before running, push after.

Look-ups made in the same turn of the event loop (the elements of a for_each becoming ready
together) go to the remote as one batched read. Objects of a hit are fetched at once, before the
step is reported cached (remote), each verified; a record whose objects fail verification is
reported and ignored, and the step runs. Pushes run in worker threads beside the run and are
awaited before the apply ends. A remote that cannot be reached is reported once and then left
alone for the rest of the run: the apply goes on locally.

Human decisions are not cache: gate and ingest steps are not ``shareable`` (steps/base.py),
and picks are never in a step's output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..errors import StoreError
from ..store.backends import ObjectBackend
from ..store.journal import CachedResult
from ..store.remote import RemoteCache, RemoteRecord


class RemoteLink:
    def __init__(
        self,
        cache: RemoteCache,
        objects: ObjectBackend,
        *,
        push: bool,
        warn: Callable[[str], None],
        local_roots: tuple[str, ...] = (),
    ) -> None:
        self.cache = cache
        self.objects = objects
        self.push_enabled = push and cache.writable
        self.warn = warn
        self.local_roots = tuple(r for r in local_roots if r)
        self.down = False
        self.hits = 0
        self.pushed = 0
        self.fetched_objects = 0
        self.damaged: set[str] = set()  # object digests found damaged in the remote
        self._pending: dict[str, asyncio.Future[RemoteRecord | StoreError | None]] = {}
        self._flush_scheduled = False
        self._pushes: list[asyncio.Future[None]] = []

    # -- look-ups -----------------------------------------------------------------------------

    async def lookup(self, key: str) -> CachedResult | None:
        """A verified remote result for ``key`` with its objects now local, or None."""
        if self.down:
            return None
        loop = asyncio.get_running_loop()
        fut = self._pending.get(key)
        if fut is None:
            fut = loop.create_future()
            self._pending[key] = fut
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
        found = await asyncio.shield(fut)
        if found is None:
            return None
        if isinstance(found, StoreError):
            self.warn(f"remote cache: ignored the record of {key[:12]}: {found.message}")
            return None
        try:
            self.fetched_objects += await asyncio.to_thread(self.cache.fetch, found, self.objects)
        except StoreError as exc:
            if "damaged" in exc.message or "missing" in exc.message:
                self.damaged.update(d for d in found.artifacts if not self.objects.has(d))
                self.warn(f"remote cache: ignored the record of {key[:12]}: {exc.message}")
            else:
                self._went_down(exc)
            return None
        self.hits += 1
        return CachedResult(
            key,
            found.output,
            sorted(found.artifacts),
            dict(found.files),
            "completed",
            "",
            found.report,
        )

    async def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._pending = self._pending, {}
        if not batch:
            return
        try:
            found = await asyncio.to_thread(self.cache.records, list(batch))
        except StoreError as exc:
            self._went_down(exc)
            found = {}
        except Exception as exc:  # a backend library's own failure: the run goes on locally
            self._went_down(StoreError(f"{type(exc).__name__}: {exc}"))
            found = {}
        for key, fut in batch.items():
            if not fut.done():
                fut.set_result(found.get(key))

    def _went_down(self, exc: StoreError) -> None:
        if not self.down:
            self.down = True
            self.warn(f"remote cache unavailable, continuing locally: {exc.message}")

    # -- pushes -------------------------------------------------------------------------------

    def push(
        self,
        *,
        key: str,
        step_type: str,
        output: Any,
        artifacts: dict[str, int],
        files: dict[str, str],
        report: Any,
    ) -> None:
        """Push one completed result in the background (no-op when pushing is off)."""
        if not self.push_enabled or self.down:
            return
        if self._names_local_path(output) or self._names_local_path(report):
            self.warn(f"remote cache: not pushing {key[:12]}: its output names a local path")
            return
        profile = output.get("provider_profile") if isinstance(output, dict) else None
        record = RemoteRecord(
            key=key,
            step_type=step_type,
            output=output,
            artifacts=artifacts,
            files=files,
            report=report,
            provider_profile=profile if isinstance(profile, str) else None,
            runner_version=__version__,
        )
        repair = self.damaged & set(artifacts)
        self._pushes.append(asyncio.ensure_future(self._push(record, repair)))

    async def _push(self, record: RemoteRecord, repair: set[str]) -> None:
        try:
            await asyncio.to_thread(self.cache.push, record, self.objects, repair=repair)
        except StoreError as exc:
            self._went_down(exc)
            return
        except Exception as exc:
            self._went_down(StoreError(f"{type(exc).__name__}: {exc}"))
            return
        self.pushed += 1
        self.damaged -= repair

    async def drain(self) -> None:
        """Wait for every push started so far."""
        while self._pushes:
            batch, self._pushes = self._pushes, []
            await asyncio.gather(*batch, return_exceptions=True)

    def _names_local_path(self, value: Any) -> bool:
        if not self.local_roots:
            return False
        if isinstance(value, str):
            return any(root in value for root in self.local_roots)
        if isinstance(value, dict):
            return any(self._names_local_path(v) for v in value.values())
        if isinstance(value, list):
            return any(self._names_local_path(v) for v in value)
        return False

    def summary(self) -> dict[str, Any]:
        return {
            "remote": self.cache.url,
            "hits": self.hits,
            "objects_fetched": self.fetched_objects,
            "pushed": self.pushed,
            "requests": self.cache.requests,
            "unavailable": self.down,
        }
