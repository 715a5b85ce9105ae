"""Benchmark: the image step over the fake provider (concurrency and per-call overhead).

1. 64 calls with a 200 ms provider delay at concurrency 16 and at 1: wall time against the ideal
   (ceil(64 / c) * 0.2 s); a ratio near 1.0 means the cap, not the engine, sets the pace.
2. Overhead per call at delay 0: the step's wall time per call minus the fake's own drawing time
   (measured by calling the provider directly), i.e. keys, ledger, logs and the object store;
   the store's durable write (two fsyncs) is printed on its own, as it dominates on slow disks.

    /work/venv/bin/python bench/bench_providers.py [--calls 64] [--size 256x256]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.providers import ImageRequest, Provider, create
from runner.steps.base import StepContext, StepEnv
from runner.steps.image import ImageStep
from runner.store.objects import ObjectStore


class Ledger:
    """An in-memory idempotency ledger (the journal's stands in for it in the engine)."""

    def __init__(self) -> None:
        self.done: dict[str, dict[str, Any]] = {}

    def completed(self, key: str) -> dict[str, Any] | None:
        return self.done.get(key)

    def begin(self, key: str, meta: Mapping[str, Any]) -> None:
        pass

    def complete(self, key: str, result: Mapping[str, Any]) -> None:
        self.done[key] = dict(result)

    def fail(self, key: str, error: str) -> None:
        pass


class Access:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def get(self, name: str | None) -> Provider:
        return self.provider

    def default_name(self) -> str:
        return self.provider.name


def run_step(
    root: Path,
    provider: Provider,
    calls: int,
    concurrency: int,
    size: str,
    tag: str,
    *,
    grouped_fsync: bool = False,
) -> float:
    objects = ObjectStore(root / ".runner" / "objects")
    if grouped_fsync:  # as inside an apply: objects are made durable in groups before commits
        objects.defer_sync()
    env = StepEnv(
        root=root,
        state_dir=root / ".runner",
        objects=objects,
        providers=Access(provider),
    )
    ctx = StepContext(env=env, run_id=f"bench-{tag}", step_id="gen", ledger=Ledger())
    args = {"prompt": f"benchmark {tag}", "n": calls, "size": size, "concurrency": concurrency}
    start = time.perf_counter()
    result = asyncio.run(ImageStep().run(ctx, args))
    objects.stop_deferring()  # the final group fsync is part of the wall time
    wall = time.perf_counter() - start
    assert result.output["failed"] == 0
    return wall


def provider_only(provider: Provider, calls: int, size: tuple[int, int]) -> float:
    async def go() -> None:
        for k in range(calls):
            await provider.generate_image(ImageRequest(prompt="raw", seed=k, size=size))

    start = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--size", default="256x256")
    parser.add_argument("--delay-ms", type=int, default=200)
    opts = parser.parse_args()
    w, h = (int(v) for v in opts.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"{opts.calls} fake image calls, {opts.size}, delay {opts.delay_ms} ms")
        for conc in (16, 1):
            fake = create("fake", {"delay_ms": opts.delay_ms, "max_concurrency": 16})
            wall = run_step(root, fake, opts.calls, conc, opts.size, f"c{conc}")
            ideal = math.ceil(opts.calls / conc) * opts.delay_ms / 1000
            print(
                f"  concurrency {conc:2d}: wall {wall:6.2f} s, ideal {ideal:6.2f} s, "
                f"ratio {wall / ideal:5.2f}"
            )
        fake = create("fake", {"max_concurrency": 16})
        draw = provider_only(fake, opts.calls, (w, h)) / opts.calls
        store = ObjectStore(root / "store-only")
        start = time.perf_counter()
        for k in range(opts.calls):
            store.put_bytes(f"object {k}".encode() * 1000)
        put = (time.perf_counter() - start) / opts.calls
        print(f"  object store put_bytes (fsync file + dir): {put * 1000:.2f} ms per object")
        for grouped in (False, True):
            for conc in (1, 16):
                wall = run_step(
                    root,
                    create("fake", {"max_concurrency": 16}),
                    opts.calls,
                    conc,
                    opts.size,
                    f"zero{conc}{grouped}",
                    grouped_fsync=grouped,
                )
                per = wall / opts.calls
                how = "grouped fsync (as in an apply)" if grouped else "fsync per object"
                print(
                    f"  delay 0, concurrency {conc:2d}, {how}: {per * 1000:6.2f} ms per call "
                    f"(fake drawing {draw * 1000:.2f} ms, engine overhead "
                    f"{(per - draw) * 1000:.2f} ms)"
                )


if __name__ == "__main__":
    main()
