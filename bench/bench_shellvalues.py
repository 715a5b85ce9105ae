"""Benchmark: a chain of N `shell` steps whose commands hold ${{ }} values (issue 40).

Each step is ``cat PREV > out/NNNNN.txt; printf '%s %s\\n' '${{ params.title }}' ${{ params.n }}
>> out/NNNNN.txt`` (a value inside '...', one bare) or, with --simple, ``cat ${{ params.src }} >
out/NNNNN.txt`` (one bare value in a command runner may start without the shell). Runs a cold
``runner apply --jobs 2`` in a fresh directory, R rounds, and prints the median wall time and CPU
time (user + system of runner and its commands: steadier on a shared machine): run it
with PYTHONPATH pointing at another checkout to compare two versions of runner.

Run: python bench/bench_shellvalues.py [--n 1000] [--rounds 3] [--simple]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pipeline(n: int, simple: bool) -> str:
    lines = [
        "runner: 1\nname: values\n",
        'params:\n  title: {type: string, default: "it\'s $(not) code"}\n',
        "  n: {type: integer, default: 7}\n  src: {type: string, default: src/in.txt}\n",
        "steps:\n",
    ]
    for i in range(n):
        prev = "src/in.txt" if i == 0 else f"out/{i - 1:05d}.txt"
        out = f"out/{i:05d}.txt"
        if simple:
            run = f"cat ${{{{ params.src }}}} > {out}"
            inputs = "[src/in.txt]"
        else:
            run = (
                f"cat {prev} > {out}; printf '%s %s\\\\n' '${{{{ params.title }}}}' "
                f"${{{{ params.n }}}} >> {out}"
            )
            inputs = f"[{prev}]"
        lines.append(
            f'  s{i:05d}:\n    uses: shell\n    with:\n      run: "{run}"\n'
            f"      inputs: {inputs}\n      outputs: [{out}]\n"
        )
    return "".join(lines)


def cold(n: int, simple: bool) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of runner and its commands) of one apply."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        (root / "src" / "in.txt").write_text("hello\n")
        (root / "runner.toml").write_text("")
        (root / "pipeline.yaml").write_text(pipeline(n, simple))
        cmd = [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--quiet", "--jobs", "2"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--simple", action="store_true")
    args = parser.parse_args()
    runs = [cold(args.n, args.simple) for _ in range(args.rounds)]
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    shape = "simple" if args.simple else "values"
    print(f"{shape} n={args.n}: wall {wall:.2f} s, cpu {cpu:.2f} s (medians of {args.rounds})")


if __name__ == "__main__":
    main()
