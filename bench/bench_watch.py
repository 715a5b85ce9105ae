"""Benchmark `runner watch`: latency from a file write to the first affected step's start,
beside a floor measured in the same run.

Shapes (``--shape``):
  shell  (issue 43, the default) a chain of N `shell` steps, each `cat previous > out`; step
         N/2 also reads src/mid.txt. Each edit rewrites src/mid.txt, so steps N/2..N-1 run
         again, exactly those (checked every cycle).
  hash   (issue 31) N-1 `hash` steps, then one `shell` step reading in.txt; each edit rewrites
         in.txt and exactly that last step runs again.

The latency is from the write to the engine's `StepStarted` of the first affected step (engine
timestamps from `--events`), debounce included; beside it, to the command's effect (the mtime of
the file it writes; the file system's clock is coarse, a few ms).

The floor is a bare script in its own copy of the tree: watchfiles' `awatch` with runner's
debounce and step (runner/surfaces/watch.py), the same quiet period after a batch, a sha256
check that the content changed, then `/bin/sh -c` of that step's command (subprocess, no
sandbox): from the same kind of write to that spawn, and to the command's effect. Edits go to
runner and the floor in turn, each after the other's cycle ended, so both see the same load.
CPU is each watching process's own (user + system, /proc) per edit, the commands not included.

Usage: python bench/bench_watch.py [--shape shell|hash] [--steps 1000] [--edits 20] [--debounce 80]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

# The floor: watchfiles with runner's settings, nothing else. Arguments: the directory to watch,
# the file, debounce ms, the command.
FLOOR = r"""
import asyncio, hashlib, json, subprocess, sys, time
from pathlib import Path
from watchfiles import awatch

directory, file, debounce, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
step = max(5, min(25, debounce // 4))  # runner/surfaces/watch.py: _step_ms
quiet = max(0, debounce - step) / 1000  # runner waits this long after a batch for another
settle_by = debounce * 10 / 1000  # _MAX_SETTLE

def digest(p):
    try:
        return hashlib.sha256(Path(p).read_bytes()).hexdigest()
    except OSError:
        return None

async def main():
    seen = digest(file)
    batches = asyncio.Queue()
    target = str(Path(file).resolve())

    async def watch():
        async for batch in awatch(directory, debounce=debounce, step=step, recursive=False,
                                  watch_filter=lambda _c, p: p == target):
            batches.put_nowait(batch)

    task = asyncio.create_task(watch())
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        await batches.get()
        first = last = loop.time()
        while True:
            wait = min(last + quiet, first + settle_by) - loop.time()
            if wait <= 0:
                break
            try:
                await asyncio.wait_for(batches.get(), wait)
                last = loop.time()
            except asyncio.TimeoutError:
                break
        now = digest(file)
        if now == seen:
            continue
        seen = now
        spawned = time.time()
        subprocess.run(["/bin/sh", "-c", command], check=True, capture_output=True)
        print(json.dumps({"spawn": spawned}), flush=True)

asyncio.run(main())
"""


def write_shell_chain(root: Path, n: int) -> tuple[str, str, str, list[str]]:
    """The chain; returns (edited file, first affected step, its command, the steps to run)."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "out").mkdir(exist_ok=True)
    (root / "src" / "in.txt").write_text("source 0\n")
    (root / "src" / "mid.txt").write_text("edit 0\n")
    mid = n // 2
    lines = ["runner: 1", "name: chain", "steps:"]
    commands: dict[str, str] = {}
    for i in range(n):
        out = f"out/{i:05d}.txt"
        ins = ["src/in.txt"] if i == 0 else [f"out/{i - 1:05d}.txt"]
        if i == mid:
            ins.append("src/mid.txt")
        sid = f"s{i:05d}"
        commands[sid] = f"cat {' '.join(ins)} > {out}"
        lines += [
            f"  {sid}:",
            "    uses: shell",
            "    with:",
            f"      run: {json.dumps(commands[sid])}",
            f"      inputs: {json.dumps(ins)}",
            f"      outputs: [{out}]",
        ]
        if i:
            lines.append(f"    needs: [s{i - 1:05d}]")
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = f"s{mid:05d}"
    return "src/mid.txt", first, commands[first], [f"s{i:05d}" for i in range(mid, n)]


def write_hash_chain(root: Path, steps: int) -> tuple[str, str, str, list[str]]:
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
    return "in.txt", "last", "cat in.txt", ["last"]


def output_of(command: str) -> str | None:
    """The file the command writes (its effect's time is that file's mtime), if any."""
    return command.rsplit("> ", 1)[1] if "> " in command else None


def step_start_after(events: Path, offset: int, step: str) -> tuple[float | None, int]:
    """Timestamp of the first StepStarted of ``step`` after byte ``offset``, and the new offset."""
    with open(events, "rb") as f:
        f.seek(offset)
        data = f.read()
    for line in data.splitlines():
        ev = json.loads(line)
        if ev["type"] == "StepStarted" and ev["step"] == step:
            return float(ev["ts"]), offset + len(data)
    return None, offset + len(data)


def cpu_s(pid: int) -> float:
    """The process's own user + system CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reader(stream: IO[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def summary(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    q = statistics.quantiles(ms, n=10, method="inclusive") if len(ms) > 1 else [ms[0], ms[0]]
    return (
        f"  {name:<28} median {statistics.median(ms):6.1f}  min {ms[0]:6.1f}  "
        f"p10-p90 {q[0]:6.1f}-{q[-1]:6.1f}  max {ms[-1]:6.1f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--shape", choices=("shell", "hash"), default="shell")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--debounce", type=int, default=80)
    ap.add_argument("--no-floor", action="store_true", help="runner alone")
    opts = ap.parse_args()
    write = write_shell_chain if opts.shape == "shell" else write_hash_chain
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["RUNNER_SERVER"] = "0"  # each process does its own work (see bench_core.ENV)

    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        root, floor_root = Path(tmp) / "runner", Path(tmp) / "floor"
        root.mkdir()
        floor_root.mkdir()
        edited, first, command, expected = write(root, opts.steps)
        write(floor_root, opts.steps)
        out = output_of(command)
        events = root / "events.jsonl"
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "runner", "watch", "pipeline.yaml", "--json"),
                *("--events", str(events), "--debounce", str(opts.debounce)),
            ],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        lines = reader(proc.stdout)
        floor: subprocess.Popen[str] | None = None
        try:
            t0 = time.perf_counter()
            initial: dict[str, Any] = json.loads(lines.get(timeout=600))
            print(
                f"initial cycle: {initial['summary']} in {initial['duration_s']:.2f}s "
                f"(process start to line {time.perf_counter() - t0:.2f}s)"
            )
            # The floor's tree has every output the commands make (the runner tree's, copied).
            for path in root.rglob("*"):
                rel = path.relative_to(root)
                if path.is_file() and rel.parts[0] not in (".runner", "events.jsonl"):
                    (floor_root / rel).write_bytes(path.read_bytes())
            if not opts.no_floor:
                floor = subprocess.Popen(
                    [
                        *(sys.executable, "-c", FLOOR, str((floor_root / edited).parent)),
                        *(str(floor_root / edited), str(opts.debounce), command),
                    ],
                    cwd=floor_root,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                assert floor.stdout is not None
                floor_lines = reader(floor.stdout)
                assert floor_lines.get(timeout=60).strip() == "ready"
            offset = events.stat().st_size
            got: dict[str, list[float]] = {
                "runner: StepStarted": [],
                "runner: command's effect": [],
                "floor: spawn": [],
                "floor: command's effect": [],
            }
            cpu = {"runner": 0.0, "floor": 0.0}
            cycle_ms: list[float] = []
            loads: list[float] = []
            for n in range(1, opts.edits + 1):
                loads.append(os.getloadavg()[0])
                time.sleep(0.3)  # let the previous cycle's tail settle
                c0 = cpu_s(proc.pid)
                written = time.time()
                (root / edited).write_text(f"edit {n}\n", encoding="utf-8")
                cycle: dict[str, Any] = json.loads(lines.get(timeout=120))
                cpu["runner"] += cpu_s(proc.pid) - c0
                if cycle["ran"] != expected or cycle["error"] is not None:
                    ran = cycle["ran"]
                    print(f"edit {n}: expected {len(expected)} steps to run, got {len(ran)}")
                    print(f"  {ran[:3]}...{ran[-3:]}; error {cycle['error']}")
                    return 1
                started, offset = step_start_after(events, offset, first)
                if started is None:
                    print(f"edit {n}: no StepStarted for {first!r} in the events")
                    return 1
                got["runner: StepStarted"].append((started - written) * 1000)
                if out is not None:
                    effect = (root / out).stat().st_mtime_ns / 1e9
                    got["runner: command's effect"].append((effect - written) * 1000)
                cycle_ms.append(cycle["duration_s"] * 1000)
                if floor is None:
                    continue
                time.sleep(0.3)
                c0 = cpu_s(floor.pid)
                written = time.time()
                (floor_root / edited).write_text(f"edit {n}\n", encoding="utf-8")
                spawned = json.loads(floor_lines.get(timeout=60))["spawn"]
                cpu["floor"] += cpu_s(floor.pid) - c0
                got["floor: spawn"].append((spawned - written) * 1000)
                if out is not None:
                    effect = (floor_root / out).stat().st_mtime_ns / 1e9
                    got["floor: command's effect"].append((effect - written) * 1000)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            if floor is not None:
                floor.kill()
                floor.wait()

    print(
        f"{opts.shape} chain of {opts.steps} steps, {opts.edits} edits of {edited}, debounce "
        f"{opts.debounce} ms; each cycle ran exactly {len(expected)} steps ({first}..)"
    )
    print(
        f"load (1 min) {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores; "
        f"CPU per edit: runner's watch process {cpu['runner'] / opts.edits * 1000:.0f} ms"
        + ("" if floor is None else f", the floor's {cpu['floor'] / opts.edits * 1000:.0f} ms")
    )
    print("write -> (ms):")
    for name, ms in got.items():
        if ms:
            print(summary(name, ms))
    if got["floor: spawn"]:
        gap = [r - f for r, f in zip(got["runner: StepStarted"], got["floor: spawn"], strict=True)]
        print(summary("StepStarted - floor spawn", gap))
        print("  goal (issue 43): runner <= floor + 40 ms")
    for name, ms in got.items():
        if ms:
            print(f"  all {name}: " + " ".join(f"{x:.0f}" for x in ms))
    print(
        f"cycle wall time (apply of {len(expected)} steps, ms): median "
        f"{statistics.median(cycle_ms):.0f}, max {max(cycle_ms):.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
