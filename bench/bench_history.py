"""Benchmark: does an apply cost more as the journal's history grows?

A 1,000-step in-process hash chain (bench_core's `hash` shape) is applied once, then its source is
edited and applied again and again, each run re-running every step (a completed result per step
per run). At 0, 10, 30 and 60 runs of history, an edit of step 500's input (`src/mid.txt`: half
re-runs) is timed as a whole `runner apply` process, best of 3. With ``--before DIR`` (a checkout of
an earlier commit), the same is done with that tree first on PYTHONPATH, side by side.

    /work/venv/bin/python bench/bench_history.py [--steps 1000] [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import REPO, apply, compile_tree
from bench_core import write_hash

MARKS = (0, 10, 30, 60)


def edit_mid(root: Path, env: dict[str, str]) -> float:
    best = float("inf")
    for _ in range(3):
        with (root / "src/mid.txt").open("a") as f:
            f.write("x\n")
        best = min(best, apply(root, env=env)[0])
    return best


def series(base: Path, steps: int, tree: Path | None) -> list[float]:
    env = {} if tree is None else {"PYTHONPATH": str(tree)}
    root = base / ("before" if tree else "this")
    root.mkdir()
    write_hash(root, steps)
    apply(root, env=env)
    out, runs = [], 0
    for mark in MARKS:
        while runs < mark:
            runs += 1
            (root / "src/in.txt").write_text(f"version {runs}\n")
            apply(root, env=env)
            print(f"  {root.name}: {runs} runs of history", file=sys.stderr, end="\r")
        out.append(edit_mid(root, env))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--before", type=Path, default=None)
    opts = parser.parse_args()
    for tree in filter(None, [REPO, opts.before]):
        compile_tree(tree)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [("this tree", series(Path(tmp), opts.steps, None))]
        if opts.before is not None:
            rows.insert(0, ("before", series(Path(tmp), opts.steps, opts.before)))
    print(
        f"edit of step {opts.steps // 2}'s input, {opts.steps} hash steps, whole process, best "
        f"of 3, load {os.getloadavg()[0]:.1f}, seconds at N runs of history:"
    )
    print(f"  {'':10}" + "".join(f"{n:>8}" for n in MARKS))
    for label, times in rows:
        print(f"  {label:10}" + "".join(f"{t:8.3f}" for t in times))


if __name__ == "__main__":
    main()
