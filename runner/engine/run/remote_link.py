"""The interpreter's link to a remote cache: look a key up before running, push after.

Look-ups made in the same turn of the event loop (the elements of a for_each becoming ready
together) go to the remote as one batched read of records, then one batched read of their
objects (concurrent GETs on S3), each object verified, before the step is reported cached
(remote): objects are fetched at once, not lazily. A record whose objects fail verification is
reported and ignored, and the step runs. A record that is malformed, unsigned or mis-signed (when
the team signs them), or that does not agree with what the local compile says its step is
(engine/run/remote_check.py) is refused: never restored, counted, and said in one line per apply.
Pushes are queued and sent in batches by one background task (objects the remote lacks, then
the records) while the run goes on; the apply waits for the queue to empty before it ends. A
remote that cannot be reached is reported once and then left alone for the rest of the run: the
apply goes on locally.

Human decisions are not cache: gate and ingest steps are not ``shareable`` (steps/base.py),
and picks are never in a step's output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ... import __version__
from ...errors import StoreError
from ...state.backends import ObjectBackend
from ...state.journal import CachedResult
from ...state.remote import RemoteCache, RemoteRecord
from .shareable import kept_back, object_kept_back


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
        self.refused: dict[str, str] = {}  # key -> why its record was refused (first reason)
        self.ignored: dict[str, str] = {}  # key -> why its objects could not be used
        self._pending: dict[str, asyncio.Future[RemoteRecord | StoreError | None]] = {}
        # base key -> the names the remote says its results read (recorded.py), asked once
        self._reads: dict[str, asyncio.Future[tuple[str, ...] | None]] = {}
        self._reads_asked: list[str] = []
        self._reads_queue: dict[str, tuple[str, ...]] = {}  # base -> names, to push
        self._flush_scheduled = False
        self._queue: list[RemoteRecord] = []
        self._pusher: asyncio.Future[None] | None = None

    # -- look-ups -----------------------------------------------------------------------------

    async def lookup(self, key: str) -> RemoteRecord | None:
        """The remote record of ``key``, its objects now local and verified, or None. The
        caller checks it against its step (engine/run/remote_check.py) before using it, and
        ``refuse``s it or ``use``s it."""
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
        return found if isinstance(found, RemoteRecord) else None

    async def recorded_reads(self, base: str) -> tuple[str, ...] | None:
        """The files the remote's latest result with base key ``base`` read (a step whose body
        records its reads: engine/run/recorded.py), or None. Only names: the caller hashes
        them as they are here, and looks the key they give up."""
        if self.down:
            return None
        fut = self._reads.get(base)
        if fut is None:
            fut = self._reads[base] = asyncio.get_running_loop().create_future()
            self._reads_asked.append(base)
            if len(self._reads_asked) == 1:  # the first asked this turn: one read for all
                asyncio.get_running_loop().call_soon(
                    lambda: asyncio.ensure_future(self._flush_reads())
                )
        return await asyncio.shield(fut)

    async def _flush_reads(self) -> None:
        asked, self._reads_asked = self._reads_asked, []
        found: dict[str, tuple[str, ...] | StoreError] = {}
        try:
            found = await asyncio.to_thread(self.cache.reads, asked)
        except StoreError as exc:
            self._went_down(exc)
        except Exception as exc:  # a backend library's own failure: the run goes on locally
            self._went_down(StoreError(f"{type(exc).__name__}: {exc}"))
        for base in asked:
            names = found.get(base)
            if isinstance(names, StoreError):
                self.warn(f"remote cache: ignored {names.message}")
                names = None
            self._reads[base].set_result(names)

    def use(self, record: RemoteRecord) -> CachedResult:
        """A checked record as the cached result it answers with."""
        self.hits += 1
        return CachedResult(
            record.key,
            record.output,
            sorted(record.artifacts),
            dict(record.files),
            "completed",
            "",
            record.report,
        )

    def why_unused(self, key: str) -> str | None:
        """Why the remote's record of ``key`` was not used, when it has one (None: absent)."""
        return self.refused.get(key) or self.ignored.get(key)

    def refuse(self, key: str, why: str) -> None:
        """Never use the record of ``key`` (said once, with the others, by ``drain``)."""
        self.refused.setdefault(key, why)

    async def _flush(self) -> None:
        """Answer every look-up asked since the last turn: one batched read of the records,
        then one batched read of their missing objects."""
        self._flush_scheduled = False
        batch, self._pending = self._pending, {}
        if not batch:
            return
        found: dict[str, RemoteRecord | StoreError] = {}
        try:
            found = await asyncio.to_thread(self.cache.records, list(batch))
            for key, value in list(found.items()):
                if isinstance(value, StoreError):
                    self.refuse(key, value.message)
                    del found[key]
            records = [r for r in found.values() if isinstance(r, RemoteRecord)]
            before = sum(1 for r in records for d in r.artifacts if self.objects.has(d))
            bad = await asyncio.to_thread(self.cache.fetch, records, self.objects)
            for key, problem in bad.items():
                record = found.pop(key)
                assert isinstance(record, RemoteRecord)
                self.damaged.update(d for d in record.artifacts if not self.objects.has(d))
                self.ignored.setdefault(key, problem.message)
                self.warn(f"remote cache: ignored the record of {key[:12]}: {problem.message}")
            after = sum(1 for r in records for d in r.artifacts if self.objects.has(d))
            self.fetched_objects += max(0, after - before)
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
        reads: tuple[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Queue one completed result for the background pusher (no-op when pushing is off);
        ``reads``: (base key, names) of a body that recorded its reads, pushed after it.

        Results queued while a batch is being sent go out together in the next one."""
        if not self.push_enabled or self.down:
            return
        why = kept_back(output, report, local_roots=self.local_roots)
        if why is not None:
            self.warn(f"remote cache: not pushing {key[:12]}: {why}")
            return
        if reads is not None and reads[1]:
            self._reads_queue[reads[0]] = reads[1]
        profile = output.get("provider_profile") if isinstance(output, dict) else None
        self._queue.append(
            RemoteRecord(
                key=key,
                step_type=step_type,
                output=output,
                artifacts=artifacts,
                files=files,
                report=report,
                provider_profile=profile if isinstance(profile, str) else None,
                runner_version=__version__,
            )
        )
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.ensure_future(self._push_loop())

    async def _push_loop(self) -> None:
        while self._queue and not self.down:
            batch, self._queue = self._queue, []
            # The objects' bytes too (shareable.py), read off the loop: a key printed into a
            # long stdout or written to a declared file is in an object, not in the output.
            held = await asyncio.to_thread(self._objects_kept_back, batch)
            for key, why in held.items():
                self.warn(f"remote cache: not pushing {key[:12]}: {why}")
            batch = [r for r in batch if r.key not in held]
            if not batch:
                continue
            repair = self.damaged & {d for r in batch for d in r.artifacts}
            try:
                await asyncio.to_thread(self.cache.push, batch, self.objects, repair=repair)
            except StoreError as exc:
                self._went_down(exc)
                return
            except Exception as exc:
                self._went_down(StoreError(f"{type(exc).__name__}: {exc}"))
                return
            self.pushed += len(batch)
            self.damaged -= repair
            reads, self._reads_queue = self._reads_queue, {}
            try:  # after the records they lead to
                await asyncio.to_thread(self.cache.push_reads, reads)
            except StoreError as exc:
                self._went_down(exc)
                return
            except Exception as exc:
                self._went_down(StoreError(f"{type(exc).__name__}: {exc}"))
                return

    async def drain(self) -> None:
        """Wait until every queued result has been pushed (or the remote went down); then
        say, in one line, how many records were refused."""
        while self._pusher is not None and not self._pusher.done():
            await self._pusher
            if self._queue and not self.down:
                self._pusher = asyncio.ensure_future(self._push_loop())
        if self.refused:
            key, why = next(iter(self.refused.items()))
            more = f" (and {len(self.refused) - 1} more)" if len(self.refused) > 1 else ""
            self.warn(
                f"remote cache: refused {len(self.refused)} record(s), not used: "
                f"{key[:12]}: {why}{more}"
            )

    def _objects_kept_back(self, batch: list[RemoteRecord]) -> dict[str, str]:
        held = {}
        for record in batch:
            why = object_kept_back(record.artifacts, self.objects)
            if why is not None:
                held[record.key] = why
        return held

    def summary(self) -> dict[str, Any]:
        return {
            "remote": self.cache.url,
            "hits": self.hits,
            "objects_fetched": self.fetched_objects,
            "pushed": self.pushed,
            "refused": len(self.refused),
            "requests": self.cache.requests,
            "unavailable": self.down,
        }
