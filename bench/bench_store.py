"""Benchmark: what verified reads cost, side by side with the unverified read they replaced.

For objects of several sizes, in one process (so the numbers share the machine's load):
  plain     open + read (what read_bytes did before issue 16 point 6)
  verified  ObjectStore.read_bytes in a fresh store: read + sha256 of the bytes
  trusted   ObjectStore.read_bytes again: the stat signature matches, no hash
  has-cold  ObjectStore.has in a fresh store (a cache check: stat + streaming hash)
  has-warm  ObjectStore.has again (stat only)
and the whole-process wall time of a full (not fast-path) no-op apply over 300 cached elements
whose outputs are 64 KiB objects, which hashes each of them once (bytecode cached, as bench_core).

Run: python bench/bench_store.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.state.objects import ObjectStore

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
SIZES = [(1 << 10, "1 KiB"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (8 << 20, "8 MiB")]


def per_call(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - began) / repeat * 1e6


def reads(root: Path, repeat: int) -> None:
    print(f"{'size':>8} {'plain us':>10} {'verified':>10} {'trusted':>10} {'has-cold':>10} "
          f"{'has-warm':>10}")
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
        print(f"{label:>8} {plain:>10.1f} {verified:>10.1f} {trusted:>10.1f} {has_cold:>10.1f} "
              f"{has_warm:>10.1f}")


def apply_noop(root: Path) -> None:
    import compileall

    import runner

    compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: objs\nsteps:\n  make:\n    uses: shell\n"
        f"    for_each: {list(range(300))}\n"
        "    with:\n      run: \"mkdir -p out && head -c 65536 /dev/urandom > out/e${{ item }}.bin\"\n"
        "      outputs: [\"out/e${{ item }}.bin\"]\n",
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
    print(f"full-path no-op apply, 300 cached 64 KiB objects (hashed once each): "
          f"best {min(times):.2f} s of {len(times)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reads(Path(tmp), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        apply_noop(Path(tmp))


if __name__ == "__main__":
    main()
