"""Benchmark: the Dask executor against the local one, side by side in one run.

1. 2,000 in-process `hash` steps (a for_each) on a 2-worker LocalCluster vs the local executor:
   overhead per step (target <= 2 ms over local), over the run itself (the journal's run
   start to end: the cluster is up by then) and over the whole process (start-up included).
2. 200 independent shell steps of `sleep 0.1`: 2 workers x 4 threads (a cluster from the
   command line: `dask scheduler` + 2 `dask worker --nthreads 4`) against the 2.5 s ideal
   (200 x 0.1 s / 8), with the local executor at `--jobs 8` beside it.
3. A 1,000-step finalise for_each (Pillow: resize, title, JPEG, compliance check) on 2 worker
   processes vs the local executor with `--jobs 2`, against Pillow's own time for the same work
   (measured here, serially, divided by 2).

With ``--baseline DIR`` (another checkout's source tree, e.g. ``git worktree add /tmp/base
<commit>``) every dask figure is measured for it too, in the same run; its processes and its
workers import runner from DIR (PYTHONPATH). Bytecode is cached for both trees.

    .venv/bin/python bench/bench_dask.py [--hash 2000] [--sleep 200] [--finalize 1000]
        [--baseline DIR]
"""

from __future__ import annotations

import argparse
import io
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._common import ENV, apply, compile_tree
from runner.surfaces.testing.daskcluster import command_line_cluster

TITLE = "We tried every thumbnail trick"


def _project(root: Path, body: str) -> Path:
    root.mkdir(parents=True)
    (root / "pipeline.yaml").write_text(body, encoding="utf-8")
    return root


def _hash(n: int) -> str:
    return (
        "runner: 1\nname: h\nsteps:\n  each:\n    uses: hash\n"
        f'    for_each: {list(range(n))}\n    with: {{value: "${{{{ item }}}}"}}\n'
    )


def _sleep(n: int) -> str:
    return (
        "runner: 1\nname: s\nsteps:\n  each:\n    uses: shell\n"
        f"    for_each: {list(range(n))}\n"
        '    with: {run: "sleep 0.1 && echo ${{ item }} > out/s${{ item }}.txt",'
        ' outputs: ["out/s${{ item }}.txt"]}\n'
    )


def _run_seconds(root: Path) -> float:
    """The newest run's own time (journal: created -> finished): the cluster is up by then."""
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        start, end = db.execute(
            "SELECT created_at, finished_at FROM runs ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
    finally:
        db.close()
    return float(end) - float(start)


class Trees:
    """Where `runner` is imported from: this checkout, and the baseline's when given."""

    def __init__(self, baseline: Path | None) -> None:
        self.names = ["this"] + (["baseline"] if baseline else [])
        self.env = {"this": {}, "baseline": {"PYTHONPATH": str(baseline)} if baseline else {}}

    def apply(self, tree: str, root: Path, *extra: str) -> tuple[float, float]:
        wall, doc = apply(root, "--state", ".runner", *extra, env=self.env[tree])
        assert doc["exit_code"] == 0
        return wall, _run_seconds(root)


def bench_hash(trees: Trees, n: int, tmp: Path) -> None:
    wall, run = trees.apply("this", _project(tmp / "h-local", _hash(n)))
    print(f"1. {n} hash steps (for_each); run = the journal's run time, wall = whole process")
    print(f"   local executor        : run {run:7.2f} s   wall {wall:7.2f} s")
    for tree in trees.names:
        dwall, drun = trees.apply(
            tree, _project(tmp / f"h-dask-{tree}", _hash(n)), "--executor", "dask", "--workers", "2"
        )
        print(
            f"   dask 2 workers, {tree:<8}: run {drun:7.2f} s   wall {dwall:7.2f} s   over local "
            f"per step: run {(drun - run) / n * 1e3:6.2f} ms, wall {(dwall - wall) / n * 1e3:6.2f} ms"
            "  (target <= 2 ms)"
        )


def bench_sleep(trees: Trees, n: int, tmp: Path) -> None:
    ideal = n * 0.1 / 8
    print(f"2. {n} x sleep 0.1 (independent shell steps); ideal (8 at a time) {ideal:.2f} s")
    for tree in trees.names:
        env = {**ENV, **trees.env[tree]}  # the workers import the same tree
        with command_line_cluster([["--nthreads", "4"]] * 2, env=env) as scheduler:
            wall, run = trees.apply(
                tree,
                _project(tmp / f"s-dask-{tree}", _sleep(n)),
                *("--executor", "dask", "--scheduler", scheduler),
            )
            print(
                f"   dask 2x4 threads, {tree:<8}: run {run:6.2f} s ({run / ideal:.2f}x ideal)"
                f"   wall {wall:6.2f} s ({wall / ideal:.2f}x)  target 1.2x"
            )
    wall, run = trees.apply("this", _project(tmp / "s-local", _sleep(n)), "--jobs", "8")
    print(
        f"   local --jobs 8          : run {run:6.2f} s ({run / ideal:.2f}x ideal)"
        f"   wall {wall:6.2f} s ({wall / ideal:.2f}x)"
    )


def _sources(n: int) -> list[bytes]:
    """``n`` distinct PNGs like a model's output (a gradient, shapes, a varying mark)."""
    from PIL import Image, ImageDraw

    base = Image.linear_gradient("L").resize((1536, 1024)).convert("RGB")
    ImageDraw.Draw(base).ellipse((300, 150, 1250, 950), fill=(210, 80, 50))
    out = []
    for i in range(n):
        img = base.copy()
        ImageDraw.Draw(img).rectangle((10, 10, 10 + i % 500, 40), fill=(i % 256, 90, 200))
        buf = io.BytesIO()
        img.save(buf, "PNG", compress_level=1)
        out.append(buf.getvalue())
    return out


def _finalize_project(root: Path, sources: list[bytes]) -> Path:
    from runner.engine.run.apply import State

    root.mkdir(parents=True)
    state = State.open(root / ".runner")  # a journal first: objects without one are refused
    try:
        digests = [state.objects.put_bytes(data) for data in sources]
    finally:
        state.close()
    (root / "pipeline.yaml").write_text(
        "runner: 1\nname: fin\nsteps:\n  each:\n    uses: finalize\n"
        f"    for_each: {digests}\n"
        f'    with: {{image: "${{{{ item }}}}", profile: youtube, title: "{TITLE}"}}\n',
        encoding="utf-8",
    )
    return root


def _pillow_seconds(sources: list[bytes]) -> float:
    """Pillow's own time for the same work in this process, one image after another."""
    from runner.steps.imaging.finalize import finalize
    from runner.steps.imaging.profiles import load_profile

    profile = load_profile("youtube")
    finalize(sources[0], profile, title=TITLE, fmt="jpeg")  # fonts loaded, first encode
    t0 = time.perf_counter()
    for data in sources:
        finalize(data, profile, title=TITLE, fmt="jpeg")
    return time.perf_counter() - t0


def bench_finalize(trees: Trees, n: int, tmp: Path) -> None:
    sources = _sources(n)
    pillow = _pillow_seconds(sources)
    ideal = pillow / 2
    print(
        f"3. {n} finalise steps (1536x1024 PNG -> titled 1280x720 JPEG); Pillow alone "
        f"{pillow:.2f} s serially, {ideal:.2f} s on 2 cores"
    )
    wall, run = trees.apply("this", _finalize_project(tmp / "f-local", sources), "--jobs", "2")
    print(
        f"   local --jobs 2          : run {run:6.2f} s   wall {wall:6.2f} s   runner over Pillow "
        f"{(run - ideal) / n * 1e3:6.2f} ms/step (run)"
    )
    for tree in trees.names:
        wall, run = trees.apply(
            tree,
            _finalize_project(tmp / f"f-dask-{tree}", sources),
            *("--executor", "dask", "--workers", "2"),
        )
        print(
            f"   dask 2 procs, {tree:<10}: run {run:6.2f} s   wall {wall:6.2f} s   runner over "
            f"Pillow {(run - ideal) / n * 1e3:6.2f} ms/step (run)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hash", type=int, default=2000)
    ap.add_argument("--sleep", type=int, default=200)
    ap.add_argument("--finalize", type=int, default=1000)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout's source tree")
    args = ap.parse_args()
    compile_tree()
    if args.baseline:
        compile_tree(args.baseline.resolve())
    trees = Trees(args.baseline.resolve() if args.baseline else None)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.hash:
            bench_hash(trees, args.hash, tmp)
        if args.sleep:
            bench_sleep(trees, args.sleep, tmp)
        if args.finalize:
            bench_finalize(trees, args.finalize, tmp)


if __name__ == "__main__":
    main()
