"""Benchmark: what a short `runner apply` costs as a whole process, beside doit doing the same.

Rows (issue 43), each in a directory of its own under ~/.cache/runner-bench (not /tmp: the
sandbox grants a project's neighbours one by one, and /tmp holds many):
  fresh    a 1-step pipeline, `echo hi > out.txt`, applied with no state (`.runner` and the
           output removed before each run); doit: one task, its database and output removed
  noop     the same pipeline applied again with nothing changed (doit: the task's `uptodate`
           is [True], so its existing target keeps it from running, as runner's result does)
  hash     bench_core's 1,000 in-process hash steps, cold (`--jobs 2`; doit: its python-action
           dodo.py), state removed before each run: not in the default rows

Tools run in turn, round by round, the order rotated each round: `runner` (this tree, each
process doing its whole work: RUNNER_SERVER=0), `warm` (this tree through its warm server,
runner/warm: the command forks from a server that has imported runner; its CPU is the command's
own plus what the server and its forked child spent meanwhile, from `runner server status`), `before`
(another tree put first on PYTHONPATH, with --before), `doit` (plain doit from its own venv, as
bench_core finds it). Every process has its bytecode cached (PYTHONDONTWRITEBYTECODE is dropped).
CPU is user + system of the finished process and its children (the sandbox's spawner included),
from the kernel's accounting; each ratio is taken round by round: median [min-max].

With --floors the fresh row gets two more columns, what no apply can go under as runner is built:
`imports` (a process importing every module the fresh apply loads, in its order, and nothing
else) and `stdlib` (the same without runner's own modules: the interpreter, the standard library
and click the apply loads); `lean` is `stdlib` without asyncio and what only it brings (ssl,
concurrent.futures, logging) and without click (with uuid and platform): what an apply that
neither awaits nor parses with click would still load from the standard library.

Run: python bench/bench_startup.py [--rounds 20] [--rows fresh,noop,hash] [--before DIR] [--floors]
         [--python ~/.cache/runner-bench/runner/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_core import ENV, cache_bytecode, doit_cmd, write_hash

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runner.warm import control  # this tree's, whatever the interpreter's path

PIPELINE = """runner: 1
name: one
steps:
  hi:
    uses: shell
    with:
      run: echo hi > out.txt
      outputs: [out.txt]
"""

DODO = """def task_hi():
    return {"actions": ["echo hi > out.txt"], "targets": ["out.txt"], "uptodate": [True]}
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process; a failure ends the bench with its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _clear(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


PROBE = """
import json, sys
sys.argv = ["runner", "apply", "pipeline.yaml", "-q"]
from runner.surfaces.cli.entry import main
try:
    main()
except SystemExit:
    pass
json.dump(list(sys.modules), open("modules.json", "w"))
"""

IMPORT_ALL = """
import importlib, json
for name in json.load(open("modules.json")):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""


# What `import asyncio` and `import click` bring that runner's own modules do not import.
ASYNC_AND_CLICK = frozenset(
    {"asyncio", "ssl", "_ssl", "concurrent", "logging", "click", "uuid", "_uuid", "platform"}
)


class Tool:
    """One tool's way to run each row in its own directory (a floor runs only in `fresh`)."""

    def __init__(
        self,
        name: str,
        root: Path,
        cmd: list[str],
        env: dict[str, str],
        doit: bool = False,
        floor: bool = False,
    ):
        self.name, self.root, self.cmd, self.env, self.doit = name, root, cmd, env, doit
        self.floor = floor
        self.servers: str | None = env.get("RUNNER_SERVER_DIR") if name == "warm" else None
        root.mkdir(parents=True)
        if doit:
            (root / "dodo.py").write_text(DODO)
        else:
            (root / "pipeline.yaml").write_text(PIPELINE)
        if not floor:
            write_hash(root / "hash", 1000)

    def run(self, row: str) -> tuple[float, float]:
        if self.servers is not None:
            before = _server_cpu(self.servers)
            wall, cpu = self._run(row)
            return wall, cpu + _server_cpu(self.servers) - before
        return self._run(row)

    def _run(self, row: str) -> tuple[float, float]:
        if self.floor:
            return timed(self.cmd, self.root, self.env)
        if row == "hash":
            where = self.root / "hash"
            _clear(where, ".runner", *(p.name for p in where.glob(".doit.db*")))
            return timed(self.cmd if self.doit else [*self.cmd, "--jobs", "2"], where, self.env)
        if row == "fresh":
            if self.doit:
                _clear(self.root, *(p.name for p in self.root.glob(".doit.db*")), "out.txt")
            else:
                _clear(self.root, ".runner", "out.txt")
        elif not (self.root / "out.txt").exists():  # noop: converge first, untimed
            self.run("fresh")
        return timed(self.cmd, self.root, self.env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--rows", default="fresh,noop")
    parser.add_argument("--python", help="runner's interpreter (default: this one)")
    parser.add_argument("--before", type=Path, help="another tree holding runner/")
    parser.add_argument("--floors", action="store_true", help="imports-only columns (fresh)")
    args = parser.parse_args()
    python = os.path.expanduser(args.python) if args.python else sys.executable
    cache_bytecode()
    base = Path.home() / ".cache" / "runner-bench"
    base.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="startup-", dir=base))
    apply = [python, "-m", "runner", "apply", "pipeline.yaml", "-q"]
    tools = [Tool("runner", top / "runner", apply, dict(ENV), doit=False)]
    servers = top / "servers"
    warm_env = dict(ENV, RUNNER_SERVER="1", RUNNER_SERVER_DIR=str(servers))
    tools.append(Tool("warm", top / "warm", apply, warm_env, doit=False))
    if args.before:
        tree = args.before.resolve()
        subprocess.run([python, "-m", "compileall", "-q", str(tree / "runner")], check=True)
        env = dict(ENV, PYTHONPATH=str(tree))
        tools.append(Tool("before", top / "before", apply, env, doit=False))
    doit = doit_cmd()
    if doit is not None:
        tools.append(
            Tool("doit", top / "doit", [*doit, "--db-file", ".doit.db"], dict(ENV), doit=True)
        )
    else:
        print("doit not found: its column is left out (see bench/README.md)", file=sys.stderr)
    if args.floors:
        tools += _floors(python, top)
    rows = args.rows.split(",")
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    loads: list[float] = []
    try:
        for tool in tools:  # one warm-up each: caches, the page cache
            for row in rows:
                tool.run(row)
        _server_started(servers)
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            order = tools[r % len(tools) :] + tools[: r % len(tools)]
            for row in rows:
                for tool in order:
                    if tool.floor and row != "fresh":
                        continue
                    got.setdefault((row, tool.name), []).append(tool.run(row))
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    finally:
        control.stop_all(str(servers))
        shutil.rmtree(top, ignore_errors=True)
    report(rows, [t.name for t in tools], got, loads)


def _server_cpu(folder: str) -> float:
    """The CPU the warm server and the applies it forked have spent so far."""
    found = control.statuses(folder)
    return sum(s["cpu_seconds"] + s["children_cpu_seconds"] for s in found)


def _server_started(folder: Path) -> None:
    """Wait for the servers the warm-up started (they import in the background: one per row's
    directory, as `python -m runner` puts the directory on the import path), and say what
    starting each cost: paid once, by the first apply of a set-up (not in the rows)."""
    deadline = time.monotonic() + 60
    while len(control.statuses(str(folder))) < len(list(folder.glob("*.lock"))) or not list(
        folder.glob("*.lock")
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"no warm server came up in {folder}")
        time.sleep(0.05)
    for s in control.statuses(str(folder)):
        print(
            f"warm server: started once in {s['cpu_seconds']:.3f} s of CPU "
            f"(served {s['served']} warm-up applies, {s['children_cpu_seconds']:.3f} s)",
            file=sys.stderr,
        )


def _floors(python: str, top: Path) -> list[Tool]:
    """The imports-only processes: the module list comes from one fresh apply, in its order."""
    probe = top / "probe"
    probe.mkdir()
    (probe / "pipeline.yaml").write_text(PIPELINE)
    subprocess.run([python, "-c", PROBE], cwd=probe, env=ENV, check=True, capture_output=True)
    names = json.loads((probe / "modules.json").read_text())
    every = [n for n in names if n != "__main__"]
    std = [n for n in every if n.split(".")[0] != "runner"]
    lean = [n for n in std if n.split(".")[0] not in ASYNC_AND_CLICK]
    tools = []
    for name, listed in (("imports", every), ("stdlib", std), ("lean", lean)):
        root = top / name
        tool = Tool(name, root, [python, "-c", IMPORT_ALL], dict(ENV), floor=True)
        (root / "modules.json").write_text(json.dumps(listed))
        tools.append(tool)
    print(
        f"floors: {len(every)} modules, {len(std)} of them not runner's, {len(lean)} lean",
        file=sys.stderr,
    )
    return tools


def report(
    rows: list[str],
    names: list[str],
    got: dict[tuple[str, str], list[tuple[float, float]]],
    loads: list[float],
) -> None:
    print(f"load average {min(loads):.1f}-{max(loads):.1f}, {len(loads)} rounds; seconds, median")
    print(f"{'row':<7} {'tool':<7} {'wall':>7} {'CPU':>7}   vs runner: wall, CPU (round by round)")
    for row in rows:
        mine = got[(row, "runner")]
        for name in names:
            runs = got.get((row, name))
            if runs is None:  # a floor, outside `fresh`
                continue
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            line = f"{row:<7} {name:<7} {wall:7.3f} {cpu:7.3f}"
            if name != "runner":
                line += f"   runner / {name}: {_ratio(mine, runs, 0)}, {_ratio(mine, runs, 1)}"
            print(line)
        warm, doit = got.get((row, "warm")), got.get((row, "doit"))
        if warm and doit:
            print(
                f"{row:<7} {'':<7} {'':>7} {'':>7}   warm / doit: "
                f"{_ratio(warm, doit, 0)}, {_ratio(warm, doit, 1)}"
            )


def _ratio(a: list[tuple[float, float]], b: list[tuple[float, float]], i: int) -> str:
    ratios = sorted(x[i] / y[i] for x, y in zip(a, b, strict=True) if y[i] > 0)
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}]"


if __name__ == "__main__":
    main()
