"""Benchmark: whole-process wall time of runner against GNU make (and doit, when installed).

Shapes, each of N steps:
  chain    N `shell` steps, each `cat previous [mid] > out`; the middle one also reads src/mid.txt
  distinct the same chain with every output distinct (`sed s/^/x/ previous [mid] > out`): the
           store makes and syncs an object per step, where the chain's outputs hold two contents
  fan      one root, N-2 leaves reading the root (the second half also reads src/mid.txt), a join
  hash     (runner only) N in-process `hash` steps in a chain after two `read` steps

Scenarios, run in this order in a fresh directory per tool and shape:
  cold     first apply / make
  noop     again, nothing changed (runner: the first no-op after a run that did work)
  noop2    once more (both no-ops are answered by the converged run's fingerprint)
  source   src/in.txt edited: everything re-runs
  mid      src/mid.txt edited: half re-runs
  validate `runner validate` (and, separately, validate of 10,000 hash steps)

Every number is one subprocess's wall time (time.perf_counter around subprocess.run), so it
includes interpreter start-up, with bytecode cached for every tool (see ENV), and its CPU time
(user + system of the process and its children). runner and make run 2 jobs at once (`make -j2`,
`runner --jobs 2`); `doit` is plain `doit`, as a user runs it (serially), `doit-n2` is
`doit -n 2`; `floor` runs the same commands the way runner spawns them with no engine (cold only;
see FLOOR). With --rounds R every tool runs every scenario R times, each round in fresh
directories with the tools' order rotated; a cell is the median, and each ratio the median of the
rounds' ratios with their range.

Run: python bench/bench_core.py [--n 1000] [--quick] [--rounds 3] [--shapes chain,distinct,fan,hash]
         [--python ~/.cache/runner-bench/runner/bin/python]   # runner's interpreter (default: this one)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAKE = "/usr/bin/make"
JOBS = 2


@dataclass
class Row:
    shape: str
    scenario: str
    tool: str
    seconds: float
    ran: int | None = None
    cpu: float | None = None  # user + system seconds of the process and its children
    round: int = 0


# Every tool runs with its bytecode cached, as an installed tool does: pip compiles doit's (and
# every dependency's) at install time, while an editable runner compiles its own on first import,
# unless PYTHONDONTWRITEBYTECODE forbids the cache (set on some machines, this one included), in
# which case each runner process would compile ~60 ms of source that doit never does.
# RUNNER_SERVER=0: each runner process does its whole work itself (no warm server, runner/warm),
# so its CPU is all in the kernel's accounting of the process; bench_startup.py and
# bench_providers.py --warm add a column with the server, its CPU counted.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["RUNNER_SERVER"] = "0"


def cache_bytecode() -> None:
    import compileall

    import runner

    compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)


def timed(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=env or ENV)
    elapsed = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed in {cwd}:\n{proc.stdout}\n{proc.stderr}")
    return elapsed, proc


# -- shapes -------------------------------------------------------------------------------------


def _sources(root: Path) -> None:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "in.txt").write_text("source 0\n")
    (root / "src" / "mid.txt").write_text("middle 0\n")
    (root / "out").mkdir(exist_ok=True)


def _runner_step(sid: str, run: str, inputs: list[str], output: str, needs: list[str]) -> str:
    text = (
        f"  {sid}:\n    uses: shell\n    with:\n      run: {json.dumps(run)}\n"
        f"      inputs: {json.dumps(inputs)}\n      outputs: [{output}]\n"
    )
    if needs:
        text += f"    needs: {json.dumps(needs)}\n"
    return text


def write_chain(root: Path, n: int) -> None:
    _sources(root)
    mid = n // 2
    steps, rules = [], [f"all: out/{n - 1:05d}.txt\n"]
    for i in range(n):
        out = f"out/{i:05d}.txt"
        ins = ["src/in.txt"] if i == 0 else [f"out/{i - 1:05d}.txt"]
        if i == mid:
            ins.append("src/mid.txt")
        run = f"cat {' '.join(ins)} > {out}"
        steps.append(_runner_step(f"s{i:05d}", run, ins, out, [f"s{i - 1:05d}"] if i else []))
        rules.append(f"{out}: {' '.join(ins)}\n\t@{run}\n")
    (root / "pipeline.yaml").write_text("runner: 1\nname: chain\nsteps:\n" + "".join(steps))
    (root / "Makefile").write_text("".join(rules))
    (root / "dodo.py").write_text(DODO_CHAIN.format(n=n, tool="cat"))
    _write_waves(root, [[r.split("\n\t@", 1)[1].strip()] for r in rules[1:]])


def write_distinct(root: Path, n: int) -> None:
    """The chain with every output distinct: step i prefixes each line of its input with x."""
    write_chain(root, n)
    for name in ("pipeline.yaml", "Makefile", "waves.json"):
        path = root / name
        path.write_text(path.read_text().replace("cat ", "sed s/^/x/ "))
    (root / "dodo.py").write_text(DODO_CHAIN.format(n=n, tool="sed s/^/x/"))
    text = (root / "pipeline.yaml").read_text().replace("name: chain", "name: distinct", 1)
    (root / "pipeline.yaml").write_text(text)


# The dodo.py files are written as a doit user writes one: a loop making the tasks.
DODO_CHAIN = """\
N = {n}


def task_build():
    for i in range(N):
        out = f"out/{{i:05d}}.txt"
        ins = ["src/in.txt"] if i == 0 else [f"out/{{i - 1:05d}}.txt"]
        if i == N // 2:
            ins.append("src/mid.txt")
        yield {{
            "name": f"s{{i:05d}}",
            "file_dep": ins,
            "targets": [out],
            "actions": [f"{tool} {{' '.join(ins)}} > {{out}}"],
        }}
"""

DODO_FAN = """\
N = {n}


def task_build():
    yield {{
        "name": "root",
        "file_dep": ["src/in.txt"],
        "targets": ["out/root.txt"],
        "actions": ["cat src/in.txt > out/root.txt"],
    }}
    leaves = []
    for i in range(N - 2):
        out = f"out/l{{i:05d}}.txt"
        leaves.append(out)
        ins = ["out/root.txt"] + (["src/mid.txt"] if i >= (N - 2) // 2 else [])
        yield {{
            "name": f"l{{i:05d}}",
            "file_dep": ins,
            "targets": [out],
            "actions": [f"cat {{' '.join(ins)}} > {{out}}"],
        }}
    yield {{
        "name": "join",
        "file_dep": leaves,
        "targets": ["out/join.txt"],
        "actions": ["cat out/l*.txt > out/join.txt"],
    }}
"""


def write_fan(root: Path, n: int) -> None:
    _sources(root)
    leaves = n - 2
    half = leaves // 2
    steps = [
        _runner_step("root", "cat src/in.txt > out/root.txt", ["src/in.txt"], "out/root.txt", [])
    ]
    rules = ["all: out/join.txt\n", "out/root.txt: src/in.txt\n\t@cat src/in.txt > $@\n"]
    outs = []
    for i in range(leaves):
        out = f"out/l{i:05d}.txt"
        outs.append(out)
        ins = ["out/root.txt"] + (["src/mid.txt"] if i >= half else [])
        run = f"cat {' '.join(ins)} > {out}"
        steps.append(_runner_step(f"l{i:05d}", run, ins, out, ["root"]))
        rules.append(f"{out}: {' '.join(ins)}\n\t@{run}\n")
    join = "cat out/l*.txt > out/join.txt"
    steps.append(
        _runner_step("join", join, outs, "out/join.txt", [f"l{i:05d}" for i in range(leaves)])
    )
    rules.append(f"out/join.txt: {' '.join(outs)}\n\t@{join}\n")
    (root / "pipeline.yaml").write_text("runner: 1\nname: fan\nsteps:\n" + "".join(steps))
    (root / "Makefile").write_text("".join(rules))
    (root / "dodo.py").write_text(DODO_FAN.format(n=n))
    recipes = [r.split("\n\t@", 1)[1].strip().replace("$@", "out/root.txt") for r in rules[1:]]
    _write_waves(root, [recipes[:1], recipes[1:-1], recipes[-1:]])


def hash_pipeline(n: int, name: str = "hashes") -> str:
    mid = n // 2
    lines = [
        f"runner: 1\nname: {name}\nsteps:\n",
        "  src: {uses: read, with: {path: src/in.txt}}\n",
        "  mid: {uses: read, with: {path: src/mid.txt}}\n",
    ]
    for i in range(n):
        prev = "steps.src.output.text" if i == 0 else f"steps.h{i - 1:05d}.output.short"
        value = f'"${{{{ {prev} }}}}"'
        if i == mid:
            value = f'["${{{{ {prev} }}}}", "${{{{ steps.mid.output.text }}}}"]'
        lines.append(f"  h{i:05d}: {{uses: hash, with: {{value: {value}}}}}\n")
    return "".join(lines)


def write_hash(root: Path, n: int) -> None:
    _sources(root)
    (root / "pipeline.yaml").write_text(hash_pipeline(n))
    (root / "dodo.py").write_text(DODO_HASH.format(n=n))


# The hash chain as doit python-actions: each task's returned dict is saved in doit's database
# and passed on with getargs, as runner passes a step's output (doit re-runs a task whose
# getargs values changed: 1,001 tasks after src/in.txt, 501 after src/mid.txt, none on a no-op).
DODO_HASH = """\
import hashlib
import json

N = {n}


def _read(path):
    with open(path, encoding="utf-8") as f:
        return {{"text": f.read()}}


def _hash(value, mid=None):
    value = value if mid is None else [value, mid]
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return {{"canonical": canonical, "sha256": digest, "short": digest[:16]}}


def task_src():
    return {{"actions": [(_read, ["src/in.txt"])], "file_dep": ["src/in.txt"]}}


def task_mid():
    return {{"actions": [(_read, ["src/mid.txt"])], "file_dep": ["src/mid.txt"]}}


def task_h():
    for i in range(N):
        args = {{"value": ("src", "text") if i == 0 else (f"h:h{{i - 1:05d}}", "short")}}
        if i == N // 2:
            args["mid"] = ("mid", "text")
        yield {{"name": f"h{{i:05d}}", "actions": [_hash], "getargs": args}}
"""


def _write_waves(root: Path, waves: list[list[str]]) -> None:
    """The commands in dependency waves, for the spawn floor (see FLOOR)."""
    (root / "waves.json").write_text(json.dumps(waves))


# The spawn floor: the same commands, spawned the way runner spawns them (runner.expr.shellrun, from a
# process that has imported what an apply imports, since the cost of a spawn grows with the
# parent), JOBS at a time, wave after wave, with no engine at all: no keys, hashing, store or
# journal. runner minus floor is what the engine costs.
FLOOR = """
import asyncio, json, sys
from pathlib import Path
import runner.surfaces.cli.app, runner.pipeline.compiler, runner.engine.run.interpreter
from runner.expr.shellrun import run_shell

async def main(jobs):
    slots = asyncio.Semaphore(jobs)
    async def one(command):
        async with slots:
            done = await run_shell(command, cwd=Path.cwd())
            if done.code != 0:
                raise SystemExit(done.stderr.decode())
    waves = sys.argv[2] if len(sys.argv) > 2 else "waves.json"
    for wave in json.loads(Path(waves).read_text()):
        await asyncio.gather(*(one(c) for c in wave))

asyncio.run(main(int(sys.argv[1])))
"""


SHAPES: dict[str, Callable[[Path, int], None]] = {
    "chain": write_chain,
    "distinct": write_distinct,
    "fan": write_fan,
    "hash": write_hash,
}


# -- tools --------------------------------------------------------------------------------------


# runner's interpreter (--python): this one by default. A clean venv like doit's gives a user's
# start-up: this machine's interpreter runs an editable install's finder and other .pth files
# at every start (bench/README.md).
PYTHON = [sys.executable]


def runner_cmd(*args: str) -> list[str]:
    return [*PYTHON, "-m", "runner", *args]


def run_runner(root: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    seconds, proc = timed(
        runner_cmd("apply", "pipeline.yaml", "--json", "--quiet", "--jobs", str(JOBS)), root, env
    )
    return seconds, int(json.loads(proc.stdout)["summary"]["ran"])


def run_make(root: Path) -> tuple[float, int | None]:
    seconds, _ = timed([MAKE, f"-j{JOBS}", "-s"], root)
    return seconds, None


# doit in a venv of its own, as bench/README.md builds it (doit is no project dependency)
DOIT_VENV = Path.home() / ".cache" / "runner-bench" / "doit" / "bin" / "doit"


def doit_cmd() -> list[str] | None:
    exe = shutil.which("doit")
    if exe:
        return [exe]
    if DOIT_VENV.is_file():
        return [str(DOIT_VENV)]
    if importlib.util.find_spec("doit") is not None:
        return [sys.executable, "-m", "doit"]
    return None


def run_doit(root: Path, jobs: int | None = None) -> tuple[float, int | None]:
    """Plain `doit`, as a user runs it (serially); with ``jobs``, `doit -n JOBS`."""
    cmd = doit_cmd()
    assert cmd is not None
    flags = ["-n", str(jobs)] if jobs else []
    seconds, _ = timed([*cmd, *flags, "--db-file", ".doit.db"], root)
    return seconds, None


def run_doit_parallel(root: Path) -> tuple[float, int | None]:
    return run_doit(root, JOBS)


def run_floor(root: Path, waves: str = "waves.json") -> tuple[float, int | None]:
    seconds, _ = timed([sys.executable, "-c", FLOOR, str(JOBS), waves], root)
    return seconds, None


def edit(root: Path, rel: str, n: int) -> None:
    (root / rel).write_text(f"{rel} edit {n}\n")


def scenarios(
    shape: str,
    tool: str,
    run: Callable[[Path], tuple[float, int | None]],
    n: int,
    base: Path,
    rnd: int = 0,
) -> list[Row]:
    root = base / f"{shape}-{tool}-{rnd}"
    root.mkdir()
    SHAPES[shape](root, n)
    rows: list[Row] = []
    if tool == "floor":  # it has no notion of up to date: only a cold run means anything
        cpu = _children_cpu()
        seconds, _ = run(root)
        return [Row(shape, "cold", tool, seconds, cpu=_children_cpu() - cpu, round=rnd)]
    for scenario, before in (
        ("cold", None),
        ("noop", None),
        ("noop2", None),
        ("source", "src/in.txt"),
        ("mid", "src/mid.txt"),
        ("noop-mid", None),  # the first no-op after a run that did work (the mid edit's)
    ):
        if before:
            edit(root, before, len(rows))
        cpu = _children_cpu()
        seconds, ran = run(root)
        rows.append(Row(shape, scenario, tool, seconds, ran, _children_cpu() - cpu, rnd))
    if tool in ("runner", "before"):
        cpu = _children_cpu()
        seconds, _ = timed(runner_cmd("validate", "pipeline.yaml"), root)
        rows.append(Row(shape, "validate", tool, seconds, cpu=_children_cpu() - cpu, round=rnd))
    return rows


def validate_big(base: Path, n: int = 10_000) -> Row:
    root = base / "validate-big"
    root.mkdir()
    _sources(root)
    (root / "pipeline.yaml").write_text(hash_pipeline(n, "big"))
    seconds, _ = timed(runner_cmd("validate", "pipeline.yaml"), root)
    return Row(f"hash x{n}", "validate", "runner", seconds)


def add_comment(root: Path, n: int) -> None:
    """A pipeline edit that changes no key: one more comment line."""
    with (root / "pipeline.yaml").open("a") as f:
        f.write(f"# edit {n}: a comment changes no step's key\n")


def add_retries(root: Path, n: int) -> None:
    """A pipeline edit the parser sees that changes no key: one step's `retries`."""
    path = root / "pipeline.yaml"
    text = path.read_text()
    start = text.index("  h00010: {uses: hash, with: ")
    end = text.index("\n", start)
    line = text[start:end]  # a one-line flow mapping: drop its closing brace (or old retries)
    head = line.rsplit(", retries:", 1)[0] if ", retries:" in line else line[:-1]
    path.write_text(text[:start] + f"{head}, retries: {n}}}" + text[end:])


class Clock:
    """Wall and CPU seconds (user + system of the child processes) of what runs inside it: on a
    loaded machine the wall time waits for other work, the CPU time much less."""

    def __enter__(self) -> Clock:
        self._wall = time.perf_counter()
        self._cpu = _children_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = _children_cpu() - self._cpu

    def __str__(self) -> str:
        return f"{self.wall:.3f} s (cpu {self.cpu:.3f})"

    def share(self, cold: Clock) -> str:
        """This clock as a share of a cold run's, wall and CPU."""
        return f"{self.wall / cold.wall:.0%} of cold (cpu {self.cpu / cold.cpu:.0%})"

    def ratio(self, other: Clock) -> str:
        return f"{self.wall / other.wall:.2f}x (cpu {self.cpu / other.cpu:.2f}x)"

    @staticmethod
    def best(clocks: list[Clock]) -> Clock:
        """The least wall and the least CPU time of several runs of one thing."""
        best = Clock()
        best.wall = min(c.wall for c in clocks)
        best.cpu = min(c.cpu for c in clocks)
        return best


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def edit_middle(base: Path, n: int, rounds: int = 3) -> list[str]:
    """(a) step n/2's input (src/mid.txt) edited in an n-step shell chain, then applied: runner
    against make, each in its own tree (make goes by mtimes), ``rounds`` times in turn; the best
    of each, and every round's CPU ratio (the machine is shared). Beside them the spawn floor:
    the n/2 commands that re-run, one after another through runner.expr.shellrun from a process that
    imported what an apply imports, with no engine (no compile, keys, store or journal): the
    least a runner spawning from Python this way could cost here."""
    runs: dict[str, Callable[[Path], tuple[float, int | None]]] = {
        "runner": run_runner,
        "make": run_make,
        "floor": lambda root: run_floor(root, "edit-waves.json"),
    }
    for tool in runs:
        root = base / f"edits-chain-{tool}"
        root.mkdir()
        write_chain(root, n)
        (run_floor if tool == "floor" else runs[tool])(root)
    floor_root = base / "edits-chain-floor"
    waves = json.loads((floor_root / "waves.json").read_text())
    (floor_root / "edit-waves.json").write_text(json.dumps(waves[n // 2 :]))
    clocks: dict[str, list[Clock]] = {tool: [] for tool in runs}
    ran: int | None = None
    for r in range(rounds):
        for tool, run in runs.items():
            edit(base / f"edits-chain-{tool}", "src/mid.txt", r + 1)
            with Clock() as clock:
                _, done = run(base / f"edits-chain-{tool}")
            clocks[tool].append(clock)
            ran = done if tool == "runner" else ran
    best = {tool: Clock.best(c) for tool, c in clocks.items()}
    per_round = " ".join(
        f"{r.cpu / m.cpu:.2f}x" for r, m in zip(clocks["runner"], clocks["make"], strict=True)
    )
    return [
        f"(a) edit-middle of {n} shell steps, best of {rounds}: runner {best['runner']} ran "
        f"{ran}, make {best['make']}: {best['runner'].ratio(best['make'])} make (target <= "
        f"1.25x; cpu ratio per round: {per_round})",
        f"(a) spawn floor, the {n - n // 2} commands alone through runner.expr.shellrun: "
        f"{best['floor']}: {best['floor'].ratio(best['make'])} make",
    ]


def edit_costs(base: Path, n_chain: int, n_hash: int, n_list: int) -> list[str]:
    """Issue 17 section 5: what an edit costs, each figure beside its peer from the same run.

    (a) edit step n/2's input (src/mid.txt) of an n-step shell chain: runner vs make;
    (b) an edit that changes no key (a comment) on n in-process hash steps: the apply vs a cold
        run (beside it a no-op with nothing edited, and the same edit with no fingerprint to
        answer it: the full path), and `runner plan` of such an edit vs `runner validate`;
    (c) `runner validate` of n shell steps vs `doit list` of the same tasks.
    """
    lines = edit_middle(base, n_chain)
    root = base / "edits-hash"
    root.mkdir()
    write_hash(root, n_hash)
    with Clock() as cold:
        run_runner(root)
    with Clock() as noop:  # nothing edited: answered by the fingerprint of the converged run
        run_runner(root)
    add_comment(root, 1)
    with Clock() as comment:
        _, ran = run_runner(root)
    lines.append(
        f"(b) comment edit of {n_hash} hash steps: apply {comment} ran {ran}, cold {cold}: "
        f"{comment.share(cold)}; target <= 25%"
    )
    lines.append(f"(b) no-op, nothing edited: {noop}: {noop.share(cold)}")
    # An edit the parser sees but no key depends on (one step's retries): the pipeline is
    # compiled (its new values must be valid), no key is evaluated.
    add_retries(root, 1)
    with Clock() as neutral:
        _, ran = run_runner(root)
    lines.append(
        f"(b) retries edit of one step (no key changes): apply {neutral} ran {ran}: "
        f"{neutral.share(cold)}; target <= 25%"
    )
    # The same edit where no fingerprint can answer (as for a pipeline with image steps or
    # gates): the full path, compiling and evaluating every step's key, all of them unchanged.
    shutil.rmtree(root / ".runner" / "converged")
    add_comment(root, 2)
    with Clock() as full:
        _, ran = run_runner(root)
    lines.append(
        f"(b) the same edit on the full path (no fingerprint): {full} ran {ran}: {full.share(cold)}"
    )
    add_comment(root, 3)
    with Clock() as planned:
        timed(runner_cmd("plan", "pipeline.yaml"), root)
    with Clock() as validated:
        timed(runner_cmd("validate", "pipeline.yaml"), root)
    lines.append(
        f"(b) plan after a comment edit: {planned}, validate {validated}: "
        f"{planned.ratio(validated)} validate (target <= 1.2x)"
    )
    add_retries(root, 2)
    with Clock() as planned_neutral:
        timed(runner_cmd("plan", "pipeline.yaml"), root)
    lines.append(
        f"(b) plan after a retries edit: {planned_neutral}, validate {validated}: "
        f"{planned_neutral.ratio(validated)} validate (target <= 1.2x)"
    )
    # The same plan with no fingerprint to answer it: the planner compiles and evaluates every
    # step's key, as it does for a pipeline with image steps or gates.
    shutil.rmtree(root / ".runner" / "converged")
    add_comment(root, 4)
    with Clock() as planned_full:
        timed(runner_cmd("plan", "pipeline.yaml"), root)
    lines.append(
        f"(b) plan on the full path (no fingerprint): {planned_full}, validate {validated}: "
        f"{planned_full.ratio(validated)} validate (target <= 1.2x)"
    )
    root = base / "edits-list"
    root.mkdir()
    write_chain(root, n_list)
    with Clock() as validated:
        timed(runner_cmd("validate", "pipeline.yaml"), root)
    cmd = doit_cmd()
    if cmd is None:
        lines.append(f"(c) validate of {n_list} shell steps: {validated} (doit not installed)")
    else:
        with Clock() as listed:
            timed([*cmd, "list", "--all", "--db-file", ".doit.db"], root)
        lines.append(
            f"(c) validate of {n_list} shell steps: runner {validated}, doit list {listed}: "
            f"{validated.ratio(listed)} doit list (target <= 1.5x)"
        )
    return lines


def _spread(values: list[float]) -> str:
    """The median, and the range when there is more than one value."""
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.2f}x"
    return f"{mid:.2f}x [{min(values):.2f}-{max(values):.2f}]"


def table(rows: list[Row], tools: list[str]) -> str:
    """Per shape and scenario: each tool's median wall seconds over the rounds, then runner's
    wall and CPU ratio to each other tool: the median of the rounds' ratios [their range]."""
    by: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        by.setdefault((r.shape, r.scenario, r.tool), []).append(r)
    others = [t for t in tools if t != "runner"]
    head = f"{'shape':<12}{'scenario':<10}" + "".join(f"{t + ' s':>10}" for t in tools)
    head += f"{'ran':>6}  " + "  ".join(f"runner/{t} wall | cpu" for t in others)
    lines = [head, "-" * len(head)]
    seen: list[tuple[str, str]] = []
    for r in rows:
        if (r.shape, r.scenario) in seen:
            continue
        seen.append((r.shape, r.scenario))
        mine = {x.round: x for x in by.get((r.shape, r.scenario, "runner"), [])}
        cells = ""
        for t in tools:
            got = by.get((r.shape, r.scenario, t))
            cells += f"{statistics.median(x.seconds for x in got):>10.3f}" if got else f"{'-':>10}"
        ratios = []
        for t in others:
            pairs = [
                (mine[x.round], x) for x in by.get((r.shape, r.scenario, t), []) if x.round in mine
            ]
            walls = [m.seconds / o.seconds for m, o in pairs if o.seconds > 0]
            cpus = [m.cpu / o.cpu for m, o in pairs if m.cpu and o.cpu]
            if walls:
                cpu = _spread(cpus) if cpus else "-"
                ratios.append(f"{_spread(walls)} | {cpu}")
            else:
                ratios.append("-")
        ran = next((x.ran for x in mine.values() if x.ran is not None), "-")
        lines.append(f"{r.shape:<12}{r.scenario:<10}{cells}{ran!s:>6}  " + "  ".join(ratios))
    return "\n".join(lines)


def targets(rows: list[Row], n: int) -> list[str]:
    """The issue's cold-run targets, and what the engine costs over the spawn floor."""
    grouped: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        grouped.setdefault((r.shape, r.scenario, r.tool), []).append(r.seconds)
    keyed = {k: statistics.median(v) for k, v in grouped.items()}
    lines = []
    for shape in ("chain", "distinct", "fan"):
        mine, floor = keyed.get((shape, "cold", "runner")), keyed.get((shape, "cold", "floor"))
        if mine is not None and floor is not None:
            lines.append(
                f"{shape} cold: engine over the spawn floor "
                f"{(mine - floor) / n * 1000:.3f} ms/step "
                f"(floor {floor:.3f} s = {floor / n * 1000:.3f} ms/step)"
            )
    chain, make = keyed.get(("chain", "cold", "runner")), keyed.get(("chain", "cold", "make"))
    if chain and make:
        lines.append(f"target chain cold <= 1.25x make: {chain / make:.2f}x")
    fan, serial = keyed.get(("fan", "cold", "runner")), keyed.get(("fan", "cold", "doit"))
    if fan and serial:
        lines.append(
            f"target fan cold --jobs 2 >= 1.6x faster than doit serial: {serial / fan:.2f}x"
        )
    fan_make = keyed.get(("fan", "cold", "make"))
    if fan and fan_make:
        lines.append(f"target fan cold <= 1.3x make -j2: {fan / fan_make:.2f}x")
    # Cores busy: CPU seconds (user + system, the process and every child it waited for) over
    # wall seconds. With 2 jobs a tool that keeps both commands running all the time nears 2.
    fan_rows: dict[str, list[Row]] = {}
    for r in rows:
        if r.shape == "fan" and r.scenario == "cold" and r.cpu is not None and r.seconds > 0:
            fan_rows.setdefault(r.tool, []).append(r)
    busy = [
        f"{tool} {statistics.median(r.cpu / r.seconds for r in got if r.cpu):.2f} "
        f"(cpu {statistics.median(r.cpu for r in got if r.cpu):.2f} s)"
        for tool, got in fan_rows.items()
    ]
    if busy:
        lines.append("fan cold, cores busy (target runner >= 1.8): " + ", ".join(busy))
    return lines


def _base_rules(base: Path) -> int:
    """How many paths beside a project's ancestors each sandboxed command is granted (its
    base Landlock rules: bench_sandbox.py's count)."""
    from runner.expr.landlock import outside

    probe = str(base.resolve() / "project")
    tops = {os.path.realpath(t) for t in ("/tmp", "/var/tmp", "/dev/shm")}
    return len({*outside(probe), *(p for t in tops for p in outside(probe, within=t))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1000, help="steps per shape (default 1000)")
    parser.add_argument("--quick", action="store_true", help="N=100 and a 1,000-step validate")
    parser.add_argument(
        "--edits",
        action="store_true",
        help="only the edit-cost figures (issue 17: 1,000-step chain, 10,000 hash/shell steps)",
    )
    parser.add_argument(
        "--shapes",
        default="chain,distinct,fan,hash",
        help="comma-separated subset of chain,distinct,fan,hash (default all)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds, tools rotated (default 1)")
    parser.add_argument("--python", help="runner's interpreter (default: this one)")
    parser.add_argument(
        "--before", type=Path, help="another tree holding runner/ (put first on PYTHONPATH)"
    )
    parser.add_argument(
        "--where",
        type=Path,
        help="where the projects are made (default: the temporary directory; every sandboxed "
        "command's Landlock rules grow with the entries beside the project's ancestors: ~1,300 "
        "in this machine's /tmp, ~50 under ~/.cache)",
    )
    args = parser.parse_args()
    if args.python:
        PYTHON[:] = [args.python]
    n = 100 if args.quick else args.n
    tools = ["runner", "make"]
    runs: dict[str, Callable[[Path], tuple[float, int | None]]] = {
        "runner": run_runner,
        "make": run_make,
    }
    notes = []
    if doit_cmd() is not None:
        tools += ["doit", "doit-n2"]
        runs["doit"] = run_doit
        runs["doit-n2"] = run_doit_parallel
    else:
        notes.append("doit: not installed (neither on PATH nor importable); column skipped")
    if not os.access(MAKE, os.X_OK):
        tools.remove("make")
        notes.append(f"make: {MAKE} not found; column skipped")
    tools.append("floor")
    runs["floor"] = run_floor
    cache_bytecode()
    if args.before is not None:
        import compileall

        compileall.compile_dir(str(args.before / "runner"), quiet=1)
        before_env = dict(ENV, PYTHONPATH=str(args.before.resolve()))
        tools.insert(1, "before")
        runs["before"] = lambda root: run_runner(root, before_env)
    if args.edits:
        print(f"edit costs, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start")
        with tempfile.TemporaryDirectory(prefix="bench-edits-") as tmp:
            for line in edit_costs(
                Path(tmp),
                100 if args.quick else 1000,
                *((1000, 1000) if args.quick else (10_000, 10_000)),
            ):
                print(line, flush=True)
        print(f"load {os.getloadavg()[0]:.1f} at the end")
        return
    rows: list[Row] = []
    load = [os.getloadavg()[0]]
    if args.where is not None:
        args.where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-core-", dir=args.where) as tmp:
        base = Path(tmp)
        rules = _base_rules(base)
        for rnd in range(args.rounds):
            order = tools[rnd % len(tools) :] + tools[: rnd % len(tools)]
            for shape in args.shapes.split(","):
                for tool in order:
                    if shape == "hash" and tool not in ("runner", "before", "doit"):
                        continue  # in-process steps: doit's python-actions are the peer
                    rows.extend(scenarios(shape, tool, runs[tool], n, base, rnd))
                    print(f"  round {rnd + 1}: done {shape} with {tool}", file=sys.stderr)
            load.append(os.getloadavg()[0])
        if "hash" in args.shapes:
            rows.append(validate_big(base, 1000 if args.quick else 10_000))
    print(
        f"N={n} steps per shape, {JOBS} jobs, {os.cpu_count()} cores, "
        f"python {sys.version.split()[0]} ({' '.join(PYTHON)}), {args.rounds} round(s), "
        f"load {min(load):.1f}-{max(load):.1f}, projects in {base.parent} "
        f"({rules} Landlock base rules a command)"
    )
    print(table(rows, tools))
    for line in targets(rows, n):
        print(line)
    for note in notes:
        print("note:", note)


if __name__ == "__main__":
    main()
