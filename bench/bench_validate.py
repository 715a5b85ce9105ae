"""Benchmark: `runner validate` of N shell steps beside `doit list` of the same tasks (issue 17
section 5, figure (c)), and optionally beside another runner tree (a "before" checkout).

The pipeline and dodo.py are bench_core's chain (bench_core.write_chain), so the figure is the
one `bench_core.py --edits` prints as (c), with more rounds: rounds alternate the tools, and the
best CPU time (user + system of the child) of each is compared, beside its wall time. On a
loaded machine the CPU time is the steadier figure; the load average is printed too.

Run: /work/venv/bin/python bench/bench_validate.py [--n 10000] [--rounds 5]
         [--before /path/to/other/checkout]   # a tree holding runner/ (put first on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import ENV, cache_bytecode, doit_cmd, runner_cmd, write_chain


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process running ``cmd``; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another tree with runner/ to compare")
    args = parser.parse_args()
    cache_bytecode()
    tools: dict[str, tuple[list[str], dict[str, str]]] = {
        "runner": (runner_cmd("validate", "pipeline.yaml"), ENV)
    }
    if args.before is not None:
        import compileall

        compileall.compile_dir(str(args.before / "runner"), quiet=1)
        env = dict(ENV, PYTHONPATH=str(args.before.resolve()))
        tools["before"] = (runner_cmd("validate", "pipeline.yaml"), env)
    doit = doit_cmd()
    if doit is not None:
        tools["doit list"] = ([*doit, "list", "--all", "--db-file", ".doit.db"], ENV)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        root = Path(tmp)
        write_chain(root, args.n)
        for _ in range(args.rounds):
            for name, (cmd, env) in tools.items():
                # doit compiles dodo.py on its first import, as in bench_core's single run
                shutil.rmtree(root / "__pycache__", ignore_errors=True)
                runs[name].append(measure(cmd, root, env))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"validate of {args.n} shell steps, best of {args.rounds} rounds (load {load}):")
    peer = min(c for _, c in runs["doit list"]) if "doit list" in runs else None
    for name, got in runs.items():
        wall, cpu = min(w for w, _ in got), min(c for _, c in got)
        ratio = f"  {cpu / peer:.2f}x doit list (cpu)" if peer else ""
        every = " ".join(f"{c:.2f}" for _, c in got)
        print(f"  {name:10s} wall {wall:6.3f} s  cpu {cpu:6.3f} s{ratio}   (cpu each: {every})")
    if peer is None:
        print("  doit: not installed (neither on PATH nor importable); no peer column")
    else:
        print("  target (issue 31): runner within 1.2x of doit list (cpu)")


if __name__ == "__main__":
    main()
