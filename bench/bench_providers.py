"""Benchmark: the image step over the fake provider (concurrency and per-call overhead).

The step runs as inside an apply: the real journal as its idempotency ledger (one committed row
before and one after every paid call), batched journal commits, and objects made durable in
groups right before the journal records them (``Journal.before_commit = ObjectStore.sync``).
Every timed section ends with the apply's final commit and fsyncs.

1. 64 calls with a 200 ms provider delay at concurrency 16 and at 1: wall time against the ideal
   (ceil(64 / c) * 0.2 s of waiting); a ratio near 1.0 means the cap, not the engine, sets the
   pace. Concurrency 16 is repeated (``--repeat``) and its median shown.
2. Overhead per call at delay 0: the step's wall time per call minus the fake's own drawing and
   PNG encoding time (the provider called directly, same sizes, median of the repeats), i.e.
   keys, ledger rows, call logs, the image check, the object store and its fsyncs. At
   concurrency 16 the drawing runs in worker threads beside that work, so the figure there is
   per call of throughput. Wall time on a shared machine is noisy, so CPU time (all threads,
   and the event loop's thread alone) is shown too, with the fake's own CPU subtracted the same
   way. SQLite statements per call are counted on the journal connection.

    /work/venv/bin/python bench/bench_providers.py [--calls 64] [--size 256x256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runner.engine.interpreter import JournalLedger
from runner.providers import ImageRequest, Provider, create
from runner.steps.base import StepContext, StepEnv
from runner.steps.image import ImageStep
from runner.store.journal import Journal
from runner.store.objects import ObjectStore


class Access:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def get(self, name: str | None) -> Provider:
        return self.provider

    def default_name(self) -> str:
        return self.provider.name


@dataclass
class Timing:
    wall: float
    cpu: float  # process CPU (every thread), the less noisy figure on a shared machine
    main_cpu: float  # the event loop's thread alone
    statements: int


def run_step(
    state: Path, provider: Provider, calls: int, concurrency: int, size: str, tag: str
) -> Timing:
    """One image step of ``calls`` iterations, set up as Interpreter.apply sets up a run."""
    objects = ObjectStore(state / "objects")
    journal = Journal.open(state)
    journal.create_run({"id": tag, "pipeline": "bench", "status": "running", "created_at": 0.0})
    statements = 0

    def count(_sql: str) -> None:
        nonlocal statements
        statements += 1

    journal.conn.set_trace_callback(count)
    journal.batch_commits()
    objects.defer_sync()
    journal.before_commit = objects.sync
    env = StepEnv(root=state.parent, state_dir=state, objects=objects, providers=Access(provider))
    ledger = JournalLedger(journal, tag, "gen")
    ctx = StepContext(env=env, run_id=tag, step_id="gen", ledger=ledger)
    args = {"prompt": f"benchmark {tag}", "n": calls, "size": size, "concurrency": concurrency}
    start, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    try:
        result = asyncio.run(ImageStep().run(ctx, args))
        journal.end_batch()  # the apply's last commit and fsyncs are part of the wall time
        journal.before_commit = None
        objects.stop_deferring()
        timing = Timing(
            time.perf_counter() - start,
            time.process_time() - cpu,
            time.thread_time() - main_cpu,
            statements,
        )
    finally:
        journal.close()
    assert result.output["failed"] == 0 and result.output["completed"] == calls
    return timing


def provider_only(provider: Provider, calls: int, size: tuple[int, int]) -> tuple[float, float]:
    """(wall, CPU) seconds per call of the fake alone: drawing and PNG encoding."""

    async def go() -> None:
        for k in range(calls):
            await provider.generate_image(ImageRequest(prompt="raw", seed=k, size=size))

    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(go())
    return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls


def durable_put(root: Path, calls: int) -> float:
    """Seconds per object of a durable put (fsync of file and directory): this disk's speed."""
    store = ObjectStore(root / "store-only")
    start = time.perf_counter()
    for k in range(calls):
        store.put_bytes(f"object {k}".encode() * 1000)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--size", default="256x256")
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    w, h = (int(v) for v in opts.size.split("x"))
    runs = iter(range(1_000_000))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def step(delay_ms: int, conc: int) -> Timing:
            settings = {"delay_ms": delay_ms, "max_concurrency": 16}
            n = next(runs)  # a fresh state and prompt: no call is answered by the ledger
            return run_step(
                root / f"s{n}", create("fake", settings), opts.calls, conc, opts.size, f"r{n}"
            )

        print(f"{opts.calls} fake image calls, {opts.size}, delay {opts.delay_ms} ms")
        step(0, 16)  # warm-up: imports, fonts, the worker threads' first start
        for conc, repeat in ((16, opts.repeat), (1, 1)):
            walls = sorted(step(opts.delay_ms, conc).wall for _ in range(repeat))
            ideal = math.ceil(opts.calls / conc) * opts.delay_ms / 1000
            wall = statistics.median(walls)
            spread = f" (min {walls[0]:.2f}, max {walls[-1]:.2f})" if repeat > 1 else ""
            print(
                f"  concurrency {conc:2d}: wall {wall:6.2f} s{spread}, ideal {ideal:6.2f} s, "
                f"ratio {wall / ideal:5.2f}"
            )
        fake = create("fake", {"max_concurrency": 16})
        alone = [provider_only(fake, opts.calls, (w, h)) for _ in range(opts.repeat)]
        draw = statistics.median(a[0] for a in alone)
        draw_cpu = statistics.median(a[1] for a in alone)
        put = durable_put(root, opts.calls)
        print(
            f"  fake alone (draw + encode): {draw * 1000:.2f} ms per call, CPU {draw_cpu * 1000:.2f}"
        )
        print(f"  durable put_bytes on this disk (fsync file + dir): {put * 1000:.2f} ms")
        ms = 1000 / opts.calls
        for conc in (1, 16):
            timings = [step(0, conc) for _ in range(opts.repeat)]
            wall = statistics.median(t.wall for t in timings) * ms
            cpu = statistics.median(t.cpu for t in timings) * ms
            main_cpu = statistics.median(t.main_cpu for t in timings) * ms
            sql = timings[0].statements / opts.calls
            print(
                f"  delay 0, concurrency {conc:2d} (median of {opts.repeat}): {wall:6.2f} ms per "
                f"call, engine overhead {wall - draw * 1000:.2f} ms; CPU {cpu:.2f} ms per call, "
                f"engine CPU {cpu - draw_cpu * 1000:.2f} ms (event loop {main_cpu:.2f}); "
                f"{sql:.1f} SQL statements per call"
            )


if __name__ == "__main__":
    main()
