"""Benchmark `runner watch` on a 1,000-step chain: latency from a file write to the step start.

The chain is 999 `hash` steps, each hashing its predecessor's short hash, then one `shell` step
that reads `in.txt`. Each of 20 edits rewrites `in.txt`; the latency is the time between the
write and the `StepStarted` event of the last step (engine timestamps from `--events`). Every
cycle must run exactly that one step.

Usage: python bench/bench_watch.py [--steps 1000] [--edits 20] [--debounce 80]
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def write_pipeline(root: Path, steps: int) -> None:
    lines = [
        "runner: 1",
        "name: chain",
        "steps:",
        "  s0:",
        "    uses: hash",
        "    with: {value: start}",
    ]
    for i in range(1, steps - 1):
        lines += [
            f"  s{i}:",
            "    uses: hash",
            f'    with: {{value: "${{{{ steps.s{i - 1}.output.short }}}}"}}',
        ]
    lines += [
        "  last:",
        "    uses: shell",
        '    with: {run: "cat in.txt", inputs: [in.txt]}',
        f"    needs: [s{steps - 2}]",
    ]
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "in.txt").write_text("edit 0\n", encoding="utf-8")


def last_start_after(events: Path, offset: int) -> tuple[float | None, int]:
    """Timestamp of the first StepStarted of `last` after byte ``offset``, and the new offset."""
    with open(events, encoding="utf-8") as f:
        f.seek(offset)
        data = f.read()
    for line in data.splitlines():
        ev = json.loads(line)
        if ev["type"] == "StepStarted" and ev["step"] == "last":
            return float(ev["ts"]), offset + len(data.encode("utf-8"))
    return None, offset + len(data.encode("utf-8"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--debounce", type=int, default=80)
    opts = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        root = Path(tmp)
        write_pipeline(root, opts.steps)
        events = root / "events.jsonl"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner",
                "watch",
                "pipeline.yaml",
                "--json",
                "--events",
                str(events),
                "--debounce",
                str(opts.debounce),
            ],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        try:
            t0 = time.perf_counter()
            first: dict[str, Any] = json.loads(lines.get(timeout=300))
            print(
                f"initial cycle: {first['summary']} in {first['duration_s']:.2f}s "
                f"(process start to line {time.perf_counter() - t0:.2f}s)"
            )
            offset = events.stat().st_size
            latencies: list[float] = []
            cycle_times: list[float] = []
            for n in range(1, opts.edits + 1):
                time.sleep(0.3)  # let the previous cycle's tail settle
                written = time.time()
                (root / "in.txt").write_text(f"edit {n}\n", encoding="utf-8")
                cycle: dict[str, Any] = json.loads(lines.get(timeout=60))
                if cycle["ran"] != ["last"] or cycle["error"] is not None:
                    print(f"edit {n}: expected exactly ['last'] to run, got {cycle}")
                    return 1
                started, offset = last_start_after(events, offset)
                if started is None:
                    print(f"edit {n}: no StepStarted for 'last' in the events")
                    return 1
                latencies.append(started - written)
                cycle_times.append(cycle["duration_s"])
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)

    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=10)
    print(
        f"{opts.steps} steps, {opts.edits} edits, debounce {opts.debounce} ms; "
        "exactly one step ran per edit"
    )
    print(
        f"write -> step start (ms): median {statistics.median(ms):.0f}, min {ms[0]:.0f}, "
        f"p10 {q[0]:.0f}, p90 {q[-1]:.0f}, max {ms[-1]:.0f}"
    )
    print("  all: " + " ".join(f"{x:.0f}" for x in ms))
    print("  target (issue 31): median under 150 ms at 1,000 steps, debounce 80 ms")
    cyc = [x * 1000 for x in cycle_times]
    print(
        f"cycle wall time (compile + apply, ms): median {statistics.median(cyc):.0f}, "
        f"max {max(cyc):.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
