"""Benchmark: what verified reads cost, side by side with the unverified read they replaced.

For objects of several sizes, in one process (so the numbers share the machine's load):
  plain     open + read (what read_bytes did before issue 16 point 6)
  verified  ObjectStore.read_bytes in a fresh store: read + sha256 of the bytes
  trusted   ObjectStore.read_bytes again: the stat signature matches, no hash
  has-cold  ObjectStore.has in a fresh store (a cache check: stat + streaming hash)
  has-warm  ObjectStore.has again (stat only)
and the whole-process wall time of a full (not fast-path) no-op apply over 300 cached elements
whose outputs are 64 KiB objects, which hashes each of them once (bytecode cached, as bench_core).

Then grouped durability (--groups): objects written as an apply writes them (fsyncs deferred),
made durable every GROUP objects as the journal's commit does, with an fsync per file and per
directory, against one syncfs per group; the two in alternating rounds in one process, so they
share the disk's load. Each figure is the time the writer spends per object (the write and its
share of the sync), median of the rounds.

Run: python bench/bench_store.py [--repeat 200] [--groups 400] [--group 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.state import objects
from runner.state.objects import ObjectStore

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["RUNNER_SERVER"] = "0"  # each process does its own work (see bench_core.ENV)
SIZES = [(1 << 10, "1 KiB"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (8 << 20, "8 MiB")]


def per_call(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - began) / repeat * 1e6


def reads(root: Path, repeat: int) -> None:
    print(
        f"{'size':>8} {'plain us':>10} {'verified':>10} {'trusted':>10} {'has-cold':>10} "
        f"{'has-warm':>10}"
    )
    for size, label in SIZES:
        store = ObjectStore(root / "objects")
        digest = store.put_bytes(os.urandom(size))
        path = store.path(digest)
        n = max(5, repeat * 1024 // max(size >> 10, 1) // 64)
        plain = per_call(lambda: path.read_bytes(), n)  # noqa: B023
        verified = per_call(lambda: ObjectStore(root / "objects").read_bytes(digest), n)  # noqa: B023
        warm = ObjectStore(root / "objects")
        warm.read_bytes(digest)
        trusted = per_call(lambda: warm.read_bytes(digest), n)  # noqa: B023
        has_cold = per_call(lambda: ObjectStore(root / "objects").has(digest), n)  # noqa: B023
        has_warm = per_call(lambda: warm.has(digest), n)  # noqa: B023
        print(
            f"{label:>8} {plain:>10.1f} {verified:>10.1f} {trusted:>10.1f} {has_cold:>10.1f} "
            f"{has_warm:>10.1f}"
        )


def apply_noop(root: Path) -> None:
    import compileall

    import runner

    compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: objs\nsteps:\n  make:\n    uses: shell\n"
        f"    for_each: {list(range(300))}\n"
        '    with:\n      run: "mkdir -p out && head -c 65536 /dev/urandom > out/e${{ item }}.bin"\n'
        '      outputs: ["out/e${{ item }}.bin"]\n',
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "-q"]
    subprocess.run(cmd, cwd=root, env=ENV, check=True, capture_output=True)
    times = []
    for _ in range(3):
        shutil.rmtree(root / ".runner" / "converged", ignore_errors=True)  # the full path
        began = time.perf_counter()
        subprocess.run(cmd, cwd=root, env=ENV, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
    print(
        f"full-path no-op apply, 300 cached 64 KiB objects (hashed once each): "
        f"best {min(times):.2f} s of {len(times)}"
    )


def grouped(base: Path, n: int, group: int, rounds: int = 5) -> None:
    """Per object: write n distinct 1 KiB objects, sync every ``group``; fsyncs vs syncfs."""
    if objects._syncfs_call() is None:
        print("grouped durability: no syncfs here (not Linux >= 5.8); every group is fsynced")
        return
    ways = {"fsync per file": 1 << 30, "syncfs per group": objects.SYNCFS_FROM}
    seen: dict[str, list[float]] = {way: [] for way in ways}
    held = objects.SYNCFS_FROM
    try:
        for r in range(rounds):
            for way, threshold in ways.items():
                objects.SYNCFS_FROM = threshold
                store = ObjectStore(base / f"{r}-{threshold}")
                store.defer_sync()
                began = time.perf_counter()
                for i in range(n):
                    store.put_bytes(f"{way} {r} {i} ".encode() * 64)
                    if i % group == group - 1:
                        store.sync()
                store.sync()
                seen[way].append((time.perf_counter() - began) / n * 1e6)
    finally:
        objects.SYNCFS_FROM = held
    medians = {way: statistics.median(v) for way, v in seen.items()}
    print(
        f"grouped durability, {n} objects of 1 KiB, a sync every {group}, {rounds} rounds "
        f"(load {os.getloadavg()[0]:.1f}):"
    )
    for way, us in medians.items():
        rounds_text = " ".join(f"{v:.0f}" for v in seen[way])
        print(f"  {way:<18} {us:8.1f} us/object (median; rounds: {rounds_text})")
    print(f"  syncfs / fsync: {medians['syncfs per group'] / medians['fsync per file']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument(
        "--groups", type=int, default=400, help="objects written for the grouped figure"
    )
    ap.add_argument("--group", type=int, default=20, help="objects per sync")
    ap.add_argument("--only-groups", action="store_true", help="only the grouped figure")
    args = ap.parse_args()
    if not args.only_groups:
        with tempfile.TemporaryDirectory() as tmp:
            reads(Path(tmp), args.repeat)
        with tempfile.TemporaryDirectory() as tmp:
            apply_noop(Path(tmp))
    # Beside the project (not /tmp, which may be another filesystem): where a store lives.
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        grouped(Path(tmp), args.groups, args.group)


if __name__ == "__main__":
    main()
