"""Benchmark: the Dask executor against the local one, side by side in one run.

1. 2,000 in-process `hash` steps (a for_each) on a 2-worker LocalCluster vs the local executor:
   overhead per step (target <= 2 ms over local).
2. 200 independent shell steps of `sleep 0.1`: 2 workers x 4 threads (the cluster from the
   command line: `dask scheduler` + 2 `dask worker --nthreads 4`) against the 2.5 s ideal
   (200 x 0.1 s / 8), with the local executor at `--jobs 8` beside it.

Whole `runner apply` processes (cluster start-up included for the LocalCluster case), bytecode
cached.

    .venv/bin/python bench/bench_dask.py [--hash 2000] [--sleep 200]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RUNNER_STATE")}


def _compile() -> None:
    import compileall

    import runner

    compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)


def _apply(root: Path, *extra: str) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "runner", "apply", "p.yaml", "--json", "-q", *extra],
        cwd=root,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"apply failed: {res.stderr[-2000:]}")
    assert json.loads(res.stdout)["exit_code"] == 0
    return wall


def _project(root: Path, body: str) -> Path:
    root.mkdir(parents=True)
    (root / "p.yaml").write_text(body, encoding="utf-8")
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hash", type=int, default=2000)
    ap.add_argument("--sleep", type=int, default=200)
    args = ap.parse_args()
    _compile()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        local = _apply(_project(tmp / "h-local", _hash(args.hash)))
        dask = _apply(
            _project(tmp / "h-dask", _hash(args.hash)), "--executor", "dask", "--workers", "2"
        )
        print(f"1. {args.hash} hash steps (for_each), whole process")
        print(f"   local executor      : {local:7.2f} s")
        print(f"   dask, 2 workers     : {dask:7.2f} s  (LocalCluster start-up included)")
        print(
            f"   overhead per step   : {(dask - local) / args.hash * 1e3:7.2f} ms  (target <= 2 ms)"
        )

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        sched = f"tcp://127.0.0.1:{port}"
        procs = [
            subprocess.Popen(
                [
                    "dask",
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--dashboard-address",
                    ":0",
                    "--no-show",
                ],
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        try:
            time.sleep(1)
            for _ in range(2):
                procs.append(
                    subprocess.Popen(
                        ["dask", "worker", sched, "--nthreads", "4", "--no-dashboard"],
                        env=ENV,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            from distributed import Client

            with Client(sched) as c:
                c.wait_for_workers(2, timeout=60)
            ideal = args.sleep * 0.1 / 8
            on_dask = _apply(
                _project(tmp / "s-dask", _sleep(args.sleep)),
                "--executor",
                "dask",
                "--scheduler",
                sched,
            )
            on_local = _apply(_project(tmp / "s-local", _sleep(args.sleep)), "--jobs", "8")
            print(f"2. {args.sleep} x sleep 0.1 (independent shell steps), whole process")
            print(f"   ideal (8 at a time) : {ideal:7.2f} s")
            print(
                f"   dask 2 x 4 threads  : {on_dask:7.2f} s  ({on_dask / ideal:.2f}x ideal; target 1.2x)"
            )
            print(f"   local --jobs 8      : {on_local:7.2f} s  ({on_local / ideal:.2f}x ideal)")
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
