"""Benchmark: `runner validate` of N shell steps beside `doit list` of the same tasks (issue 17
section 5, figure (c)), and optionally beside another runner tree (a "before" checkout).

The pipeline and dodo.py are bench_core's chain (bench_core.write_chain: the dodo.py is a plain
loop making the tasks, as a doit user writes one), so the figure is the one `bench_core.py
--edits` prints as (c), with more rounds: rounds alternate the tools; each tool's best and median
wall and CPU time (user + system of the child) are printed, and runner's ratio to `doit list`
round by round, wall and CPU: the median [range]. On a loaded machine the CPU time is the
steadier figure; the load average is printed too.

Run: python bench/bench_validate.py [--n 10000] [--rounds 5] [--python PATH]
         [--before /path/to/other/checkout]   # a tree holding runner/ (put first on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import ENV, PYTHON, cache_bytecode, doit_cmd, runner_cmd, write_chain


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
    parser.add_argument("--python", help="runner's interpreter (default: this one)")
    args = parser.parse_args()
    if args.python:
        PYTHON[:] = [args.python]
    load = [os.getloadavg()[0]]
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
    load.append(os.getloadavg()[0])
    print(
        f"validate of {args.n} shell steps, {args.rounds} rounds, load {min(load):.1f}-"
        f"{max(load):.1f}, runner on {' '.join(PYTHON)}; best / median seconds:"
    )
    peer = runs.get("doit list")
    for name, got in runs.items():
        walls, cpus = [w for w, _ in got], [c for _, c in got]
        line = (
            f"  {name:10s} wall {min(walls):6.3f} / {statistics.median(walls):6.3f}  "
            f"cpu {min(cpus):6.3f} / {statistics.median(cpus):6.3f}"
        )
        if peer is not None and name != "doit list":
            wr = [w / pw for (w, _), (pw, _) in zip(got, peer, strict=True)]
            cr = [c / pc for (_, c), (_, pc) in zip(got, peer, strict=True)]
            line += (
                f"   / doit list: wall {statistics.median(wr):.2f}x [{min(wr):.2f}-{max(wr):.2f}]"
                f", cpu {statistics.median(cr):.2f}x [{min(cr):.2f}-{max(cr):.2f}]"
            )
        print(line)
    if peer is None:
        print("  doit: not installed (neither on PATH nor importable); no peer column")
    else:
        print("  target (issue 31): runner within 1.2x of doit list (cpu)")


if __name__ == "__main__":
    main()
