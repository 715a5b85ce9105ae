"""Benchmark: what the sandbox costs -- the same pipelines with steps confined (the default) and
with `sandbox: false` on every step, side by side in one run.

Shapes (bench_core.py's, N steps): `chain` (serial: each step's command waits for the last) and
`fan` (a root, N-2 leaves, a join; `--jobs 2`). Each round applies both variants cold in fresh
directories, in rotated order; a cell is the median of the rounds, each ratio the median of the
rounds' ratios with their range. Wall is one `runner apply` process's; CPU is user + system of
that process and its children (the spawner, bwrap and the commands included).

`--micro` adds the per-command figure: `true` through run_shell 500 times in one process,
confined and not (the spawner's message, its thread, Landlock's rules, posix_spawn).

The issue's budget: the chain cold with the sandbox on within 1.15x of off.

Run: python bench/bench_sandbox.py [--n 1000] [--rounds 3] [--shapes chain,fan] [--micro]
                                   [--where DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ENV, compile_tree
from bench_core import write_chain, write_fan

WRITERS = {"chain": write_chain, "fan": write_fan}


def unsandboxed(root: Path) -> None:
    """Every step of the pipeline says `sandbox: false`."""
    path = root / "pipeline.yaml"
    path.write_text(
        path.read_text().replace("    uses: shell\n", "    uses: shell\n    sandbox: false\n")
    )


def apply_cold(root: Path, extra: dict[str, str] | None = None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "-q", "--jobs", "2"],
        cwd=root,
        env={**ENV, "NO_COLOR": "1", **(extra or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"apply failed in {root} ({res.returncode}):\n{res.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


VARIANTS = {
    "sandboxed": {},  # the spawner's C loop (runner/expr/_spawnc.c), where it was built
    "python loop": {"RUNNER_SPAWNER": "python"},  # the same sandbox, the spawner's Python loop
    "unsandboxed": {},  # `sandbox: false` on every step
}


def bench_shape(shape: str, n: int, rounds: int, where: Path) -> None:
    cells: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        order = list(VARIANTS)
        order = order[r % len(order) :] + order[: r % len(order)]  # rotated each round
        for variant in order:
            base = Path(tempfile.mkdtemp(prefix=f"bench-sandbox-{shape}-", dir=where))
            try:
                WRITERS[shape](base, n)
                if variant == "unsandboxed":
                    unsandboxed(base)
                cells[variant].append(apply_cold(base, VARIANTS[variant]))
            finally:
                shutil.rmtree(base, ignore_errors=True)
    off = cells["unsandboxed"]
    print(
        f"{shape} n={n} in {where} ({_siblings(where)} rules beside it), rounds={rounds}: "
        f"unsandboxed {statistics.median(x[0] for x in off):.3f} s wall "
        f"{statistics.median(x[1] for x in off):.3f} s CPU"
    )
    for variant in ("sandboxed", "python loop"):
        on = cells[variant]
        walls = [a[0] / b[0] for a, b in zip(on, off, strict=True)]
        cpus = [a[1] / b[1] for a, b in zip(on, off, strict=True)]
        print(
            f"  {variant:12} {statistics.median(x[0] for x in on):7.3f} s wall "
            f"{statistics.median(x[1] for x in on):7.3f} s CPU | vs unsandboxed: wall "
            f"{statistics.median(walls):.2f}x ({min(walls):.2f}-{max(walls):.2f}) CPU "
            f"{statistics.median(cpus):.2f}x ({min(cpus):.2f}-{max(cpus):.2f})"
        )


def _siblings(where: Path) -> int:
    """How many paths a project made in ``where`` is granted beside its ancestors (the base
    rules every command's ruleset holds)."""
    from runner.expr.landlock import outside

    probe = str(where.resolve() / "project")
    tops = {os.path.realpath(t) for t in ("/tmp", "/var/tmp", "/dev/shm")}
    return len({*outside(probe), *(p for t in tops for p in outside(probe, within=t))})


def micro(where: Path, count: int = 500) -> None:
    from runner.expr.confined import Confinement, status
    from runner.expr.shellrun import run_shell

    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-micro-", dir=where))
    (root / "in.txt").write_text("x\n")
    confine = Confinement(str(root.resolve()), read=(str(root.resolve() / "in.txt"),))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNNER_SERVER": "0"}

    async def each(command: str, confined: bool) -> float:
        await run_shell(command, cwd=root, env=env, confine=confine if confined else None)
        t0 = time.perf_counter()
        for _ in range(count):
            await run_shell(command, cwd=root, env=env, confine=confine if confined else None)
        return (time.perf_counter() - t0) / count * 1e3

    old = os.getcwd()
    os.chdir(root)
    try:
        print(f"sandbox here: {status().kind}")
        for command in ("true", "cat in.txt | wc -l"):
            plain = asyncio.run(each(command, False))
            boxed = asyncio.run(each(command, True))  # (RUNNER_SPAWNER=python: its Python loop)
            print(
                f"per command {command!r:22} confined {boxed:.3f} ms, plain {plain:.3f} ms, "
                f"+{boxed - plain:.3f} ms"
            )
    finally:
        os.chdir(old)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="chain,fan")
    parser.add_argument("--micro", action="store_true")
    parser.add_argument(
        "--where",
        default=str(Path.home() / ".cache" / "runner-bench" / "sandbox"),
        help="where the projects are made (default: under ~/.cache, as a user's project is; "
        "/tmp, where many entries sit beside them, costs more rules a command)",
    )
    args = parser.parse_args()
    compile_tree()
    print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    where = Path(args.where)
    where.mkdir(parents=True, exist_ok=True)
    if args.micro:
        micro(where)
    for shape in args.shapes.split(","):
        if shape:
            bench_shape(shape, args.n, args.rounds, where)
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
