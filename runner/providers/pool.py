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
``probe_interval`` seconds (doubling while it keeps refusing, up to 60 s); then one call at a time
probes it, and an answer puts it back. A call pinned to a backend (a remote job re-attaching to
the server that has it) always goes there. Which backend served a call is never part of the
provider profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

MAX_DOWN_SECONDS = 60.0


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
    import httpx  # a URL httpx cannot send to is a setting error here, not a crash at the call

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
    probe_interval: float = 5.0
    _changed: asyncio.Condition | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    @property
    def capacity(self) -> int:
        return sum(b.max_concurrency for b in self.backends)

    def find(self, url: str) -> Backend | None:
        url = url.rstrip("/")
        return next((b for b in self.backends if b.url == url), None)

    def healthy_count(self) -> int:
        return sum(1 for b in self.backends if b.healthy)

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._changed is None or self._loop is not loop:
            self._loop, self._changed = loop, asyncio.Condition()
        return self._changed

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
        used whatever its load or health. Otherwise this waits for a usable backend.
        """
        if pin is not None:
            chosen = self.find(pin) or Backend(pin.rstrip("/"), 1)
        else:
            cond = self._condition()
            async with cond:
                while (picked := self._pick()) is None:
                    wait = self._earliest_probe()
                    with contextlib.suppress(TimeoutError):  # a backend's probe is due
                        await asyncio.wait_for(
                            cond.wait(), max(wait, 0.01) if wait is not None else None
                        )
                chosen = picked
        chosen.in_flight += 1
        chosen.calls += 1
        chosen.last_used = time.monotonic()
        try:
            yield chosen
        finally:
            chosen.in_flight -= 1
            await self._notify()

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify()  # one backend slot came free: one waiter can take it

    def refused(self, backend: Backend) -> None:
        """``backend`` refused a connection: out of the rotation until its probe is due."""
        backend.refused += 1
        backend.down_for = min(
            MAX_DOWN_SECONDS, backend.down_for * 2 if backend.down_for else self.probe_interval
        )
        backend.down_until = time.monotonic() + backend.down_for

    def answered(self, backend: Backend) -> None:
        """``backend`` answered a request: healthy again."""
        if not backend.healthy:
            backend.down_until, backend.down_for = 0.0, 0.0
