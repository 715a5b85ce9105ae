"""Backend pools: one provider spread over several servers (a ComfyUI or A1111 farm, several
OpenAI-compatible servers).

```toml
[providers.farm]
type = "comfyui"
base_urls = ["http://gpu1:8188", "http://gpu2:8188"]   # each gets the provider's default limit

[[providers.farm.backends]]                             # or: one table per backend
url = "http://gpu3:8188"
max_concurrency = 2                                     # calls in flight on this backend
weight = 2.0                                            # share of the load (default 1)
```

A call goes to the least-loaded healthy backend with room: the lowest
``in_flight / (max_concurrency * weight)``, ties to the one used longest ago. A backend that
refuses a connection (nothing was sent, so the call is safe elsewhere) is taken out for
``probe_interval`` seconds (default 1 s: a restart is noticed soon), doubling while it keeps
refusing, up to 15 s; then one call at a time probes it, and an answer puts it back. A call
pinned to a backend (a remote job re-attaching to the server that has it) always goes there.
Which backend served a call is never part of the provider profile.

The user hears it at once when a backend goes down and when it is back (``notices``: the run's
console), with how many calls wait. A call waits for a usable backend at most ``max_wait``
seconds (default 120) counted from when the last one went down; then it fails, unsent, and the
next apply sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

PROBE_INTERVAL = 1.0  # the first wait before a down backend is tried again
MAX_DOWN_SECONDS = 15.0  # the longest, after doubling
MAX_WAIT = 120.0  # how long calls wait for a backend to come back before they fail

# Set by the engine for a run: where a backend going down or coming back is told (the console).
_notices: ContextVar[Callable[[str], None] | None] = ContextVar("runner_pool_notices", default=None)


@contextlib.contextmanager
def notices(say: Callable[[str], None]) -> Iterator[None]:
    """Within this block, pools tell ``say`` when a backend goes down or comes back."""
    token = _notices.set(say)
    try:
        yield
    finally:
        _notices.reset(token)


class NoBackend(Exception):
    """No backend of the pool answered within ``max_wait``; the call was never sent."""


class PoolConfigError(ValueError):
    """The backends settings are not valid (the provider words it for the user)."""


@dataclass
class Backend:
    """One server of a pool and what this run has seen of it."""

    url: str
    max_concurrency: int
    weight: float = 1.0
    in_flight: int = 0
    calls: int = 0  # calls routed here
    refused: int = 0  # connections it refused
    down_until: float = 0.0  # monotonic; 0 while healthy
    down_for: float = 0.0  # the current penalty, doubled on each refusal in a row
    down_since: float = 0.0  # wall-clock time of the first refusal in a row (0: up)
    last_used: float = 0.0

    @property
    def healthy(self) -> bool:
        return self.down_until == 0.0

    def load(self) -> float:
        return self.in_flight / (self.max_concurrency * self.weight)

    def usable(self, now: float) -> bool:
        if self.healthy:
            return self.in_flight < self.max_concurrency
        return now >= self.down_until and self.in_flight == 0  # one probe at a time

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "max_concurrency": self.max_concurrency,
            "weight": self.weight,
            "health": "up" if self.healthy else "down",
            "in_flight": self.in_flight,
            "calls": self.calls,
            "refused": self.refused,
        }


def parse_backends(
    settings: Mapping[str, Any], *, default_url: str, default_max: int
) -> list[Backend]:
    """The backends named by ``base_url``, ``base_urls`` and ``backends`` (in that order).

    Raises PoolConfigError for a malformed entry or a URL listed twice.
    """
    out: list[Backend] = []
    if "base_url" in settings:
        out.append(Backend(_url(settings["base_url"], "base_url"), default_max))
    urls = settings.get("base_urls", [])
    if not isinstance(urls, list):
        raise PoolConfigError("base_urls must be a list of URLs")
    out.extend(Backend(_url(u, "base_urls"), default_max) for u in urls)
    tables = settings.get("backends", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise PoolConfigError("backends must be a list of tables ([[providers.NAME.backends]])")
    for t in tables:
        unknown = sorted(set(t) - {"url", "max_concurrency", "weight"})
        if unknown:
            raise PoolConfigError(
                f"backends: unknown key(s) {', '.join(unknown)} (accepted: url, max_concurrency, "
                "weight)"
            )
        limit = t.get("max_concurrency", default_max)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise PoolConfigError("backends: max_concurrency must be an integer >= 1")
        weight = t.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise PoolConfigError("backends: weight must be a number > 0")
        out.append(Backend(_url(t.get("url"), "backends: url"), limit, float(weight)))
    if not out:
        out.append(Backend(default_url.rstrip("/"), default_max))
    seen: set[str] = set()
    for b in out:
        if b.url in seen:
            raise PoolConfigError(f"backend {b.url} is listed twice")
        seen.add(b.url)
    return out


def _url(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise PoolConfigError(f"{what} must be an http:// or https:// URL, got {value!r}")
    # a URL httpx cannot send to is a setting error here, not a crash at the call
    from ._httpx import httpx

    try:
        host = httpx.URL(value).host
    except httpx.InvalidURL as exc:
        raise PoolConfigError(f"{what} is not a URL requests go to ({exc}): {value!r}") from None
    if not host:
        raise PoolConfigError(f"{what} names no host: {value!r}")
    return value.rstrip("/")


@dataclass
class BackendPool:
    """Routes calls over ``backends``; one per provider instance, shared by the whole run."""

    backends: Sequence[Backend]
    probe_interval: float = PROBE_INTERVAL
    max_wait: float = MAX_WAIT
    name: str = ""  # the provider's, for what the user is told
    waiting: int = 0  # calls waiting for a usable backend now
    _waiters: list[asyncio.Future[None]] = field(default_factory=list, repr=False)
    _all_down_at: float | None = field(default=None, repr=False)  # monotonic
    _unlisted: dict[str, Backend] = field(default_factory=dict, repr=False)
    # Calls of the provider queued before the pool (its max_concurrency gate): they wait too.
    queued: Callable[[], int] = field(default=lambda: 0, repr=False)

    @property
    def capacity(self) -> int:
        return sum(b.max_concurrency for b in self.backends)

    def find(self, url: str) -> Backend | None:
        url = url.rstrip("/")
        return next((b for b in self.backends if b.url == url), None)

    def healthy_count(self) -> int:
        return sum(1 for b in self.backends if b.healthy)

    def _pick(self) -> Backend | None:
        now = time.monotonic()
        best: Backend | None = None
        for b in self.backends:
            if b.usable(now) and (
                best is None or (b.load(), b.last_used) < (best.load(), best.last_used)
            ):
                best = b
        return best

    def _earliest_probe(self) -> float | None:
        waits = [b.down_until for b in self.backends if not b.healthy and b.in_flight == 0]
        return min(waits) - time.monotonic() if waits else None

    @asynccontextmanager
    async def lease(self, pin: str | None = None) -> AsyncIterator[Backend]:
        """A backend for one call, held until the block ends.

        ``pin`` names the backend that must serve it (re-attaching to a remote job); it is
        used whatever its load or health. Otherwise this waits for a usable backend, at most
        ``max_wait`` seconds after every backend went down (then NoBackend: nothing was sent).
        """
        if pin is not None:
            # A backend no longer configured is remembered too: its refusals must back off.
            chosen = self.find(pin) or self._unlisted.setdefault(
                pin.rstrip("/"), Backend(pin.rstrip("/"), 1)
            )
            if not chosen.healthy:  # wait for its probe: it holds the job, none other will do
                if time.time() - chosen.down_since >= self.max_wait:
                    raise NoBackend(self._gave_up())
                await asyncio.sleep(max(0.0, chosen.down_until - time.monotonic()))
        else:
            self.waiting += 1
            try:
                while (picked := self._pick()) is None:
                    wait = self._earliest_probe()
                    if self._all_down_at is not None:
                        left = self._all_down_at + self.max_wait - time.monotonic()
                        if left <= 0:
                            raise NoBackend(self._gave_up())
                        wait = left if wait is None else min(wait, left)
                    # a slot came free, a probe is due, or max_wait
                    await self._changed(max(wait, 0.01) if wait is not None else None)
            finally:
                self.waiting -= 1
            chosen = picked
        chosen.in_flight += 1
        chosen.calls += 1
        chosen.last_used = time.monotonic()
        try:
            yield chosen
        finally:
            chosen.in_flight -= 1
            self._wake()

    async def _changed(self, timeout: float | None) -> None:
        """Wait until a backend slot comes free or ``timeout`` passes.

        No lock: picking a backend and taking it happen with no await between them, so no
        other call runs in between. A lock here (an asyncio.Condition waited on under
        wait_for) broke on a cancel that arrived while wait_for was ending its timed-out wait:
        the block released a lock it no longer held ("RuntimeError: Lock is not acquired"),
        and the orphaned wait then took the lock for good, so every later call, and the end of
        the cancelled run, waited for ever.
        """
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(woken)
        try:
            await asyncio.wait({woken}, timeout=timeout)
        finally:
            self._waiters.remove(woken)

    def _wake(self) -> None:
        # Every waiter looks again (each picks for itself): a waker that is cancelled
        # before it runs cannot swallow the news that was meant for it.
        for woken in self._waiters:
            if not woken.done() and not woken.get_loop().is_closed():
                woken.set_result(None)

    def _gave_up(self) -> str:
        down = [b for b in self.backends if not b.healthy]
        since = min((b.down_since for b in down), default=time.time())
        names = ", ".join(b.url for b in down) or "every backend"
        return (
            f"{names} down since {_clock(since)}: no answer within max_wait = "
            f"{self.max_wait:g} s; the call was not sent (the next apply sends it)"
        )

    def refused(self, backend: Backend) -> None:
        """``backend`` refused a connection: out of the rotation until its probe is due."""
        backend.refused += 1
        first = backend.healthy
        backend.down_for = min(
            MAX_DOWN_SECONDS, backend.down_for * 2 if backend.down_for else self.probe_interval
        )
        backend.down_until = time.monotonic() + backend.down_for
        if first:
            backend.down_since = time.time()
        if self.healthy_count() == 0 and self._all_down_at is None:
            self._all_down_at = time.monotonic()
        if first or backend.down_for != MAX_DOWN_SECONDS or backend.refused % 10 == 0:
            # At once, then at each longer interval, then now and then: never a silent wait.
            calls = self.waiting + backend.in_flight + self.queued()
            self._say(
                f"backend {self._label(backend)} down since {_clock(backend.down_since)}, "
                f"probing every {backend.down_for:g} s; {calls} call{'s' if calls != 1 else ''} "
                "waiting"
            )

    def answered(self, backend: Backend) -> None:
        """``backend`` answered a request: healthy again."""
        if not backend.healthy:
            self._say(
                f"backend {self._label(backend)} is back after "
                f"{time.time() - backend.down_since:.0f} s"
            )
            backend.down_until, backend.down_for, backend.down_since = 0.0, 0.0, 0.0
            self._all_down_at = None

    def _label(self, backend: Backend) -> str:
        return f"{backend.url} ({self.name})" if self.name else backend.url

    @staticmethod
    def _say(line: str) -> None:
        tell(line)


def tell(line: str) -> None:
    """Say ``line`` on the run's console now (a provider's word the user must not miss)."""
    say = _notices.get()
    if say is not None:
        say(line)


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when))
