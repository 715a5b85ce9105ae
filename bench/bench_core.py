"""Benchmark: whole-process wall time of runner against GNU make (and doit, when installed).

Shapes, each of N steps:
  chain    N `shell` steps, each `cat previous [mid] > out`; the middle one also reads src/mid.txt
  fan      one root, N-2 leaves reading the root (the second half also reads src/mid.txt), a join
  hash     (runner only) N in-process `hash` steps in a chain after two `read` steps

Scenarios, run in this order in a fresh directory per tool and shape:
  cold     first apply / make
  noop     again, nothing changed (runner: the first no-op after work takes the full path)
  noop2    once more (runner: answered by the converged-run fingerprint, without compiling)
  source   src/in.txt edited: everything re-runs
  mid      src/mid.txt edited: half re-runs
  validate `runner validate` (and, separately, validate of 10,000 hash steps)

Every number is one subprocess's wall time (time.perf_counter around subprocess.run), so it
includes interpreter start-up, with bytecode cached for every tool (see ENV). Both tools run 2 jobs at once (`make -j2`, `runner --jobs 2`);
`doit` runs 2 (`-n 2`), `doit-1` runs serially (the fan target compares with it), `floor` runs
the same commands the way runner spawns them with no engine (cold only; see FLOOR).

Run: /work/venv/bin/python bench/bench_core.py [--n 1000] [--quick] [--shapes chain,fan,hash]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
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


# Every tool runs with its bytecode cached, as an installed tool does: pip compiles doit's (and
# every dependency's) at install time, while an editable runner compiles its own on first import,
# unless PYTHONDONTWRITEBYTECODE forbids the cache (set on some machines, this one included), in
# which case each runner process would compile ~60 ms of source that doit never does.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cache_bytecode() -> None:
    import compileall

    import runner

    compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=ENV)
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
    _write_dodo(root, [(f"s{i:05d}", r) for i, r in enumerate(rules[1:])])
    _write_waves(root, [[r.split("\n\t@", 1)[1].strip()] for r in rules[1:]])


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
    _write_dodo(root, [(f"t{i}", r) for i, r in enumerate(rules[1:])])
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


def _write_dodo(root: Path, rules: list[tuple[str, str]]) -> None:
    """The same rules as doit tasks (file_dep/targets; doit checks content by md5)."""
    tasks = []
    for name, rule in rules:
        head, recipe = rule.split("\n\t@", 1)
        target, deps = head.split(": ", 1)
        # make's automatic variable has no meaning to doit: spell the target out
        action = recipe.strip().replace("$@", target)
        tasks.append(
            {"name": name, "file_dep": deps.split(), "targets": [target], "actions": [action]}
        )
    (root / "dodo.py").write_text(
        "import json\n"
        f"TASKS = json.loads({json.dumps(json.dumps(tasks))})\n\n"
        "def task_build():\n"
        "    for t in TASKS:\n"
        "        yield dict(t)\n"
    )


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
    "fan": write_fan,
    "hash": write_hash,
}


# -- tools --------------------------------------------------------------------------------------


def runner_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


def run_runner(root: Path) -> tuple[float, int]:
    seconds, proc = timed(
        runner_cmd("apply", "pipeline.yaml", "--json", "--quiet", "--jobs", str(JOBS)), root
    )
    return seconds, int(json.loads(proc.stdout)["summary"]["ran"])


def run_make(root: Path) -> tuple[float, int | None]:
    seconds, _ = timed([MAKE, f"-j{JOBS}", "-s"], root)
    return seconds, None


def doit_cmd() -> list[str] | None:
    exe = shutil.which("doit")
    if exe:
        return [exe]
    if importlib.util.find_spec("doit") is not None:
        return [sys.executable, "-m", "doit"]
    return None


def run_doit(root: Path, jobs: int = JOBS) -> tuple[float, int | None]:
    cmd = doit_cmd()
    assert cmd is not None
    seconds, _ = timed([*cmd, "-n", str(jobs), "--db-file", ".doit.db"], root)
    return seconds, None


def run_doit_serial(root: Path) -> tuple[float, int | None]:
    return run_doit(root, 1)


def run_floor(root: Path, waves: str = "waves.json") -> tuple[float, int | None]:
    seconds, _ = timed([sys.executable, "-c", FLOOR, str(JOBS), waves], root)
    return seconds, None


def edit(root: Path, rel: str, n: int) -> None:
    (root / rel).write_text(f"{rel} edit {n}\n")


def scenarios(
    shape: str, tool: str, run: Callable[[Path], tuple[float, int | None]], n: int, base: Path
) -> list[Row]:
    root = base / f"{shape}-{tool}"
    root.mkdir()
    SHAPES[shape](root, n)
    rows: list[Row] = []
    if tool == "floor":  # it has no notion of up to date: only a cold run means anything
        cpu = _children_cpu()
        seconds, _ = run(root)
        return [Row(shape, "cold", tool, seconds, cpu=_children_cpu() - cpu)]
    for scenario, before in (
        ("cold", None),
        ("noop", None),
        ("noop2", None),
        ("source", "src/in.txt"),
        ("mid", "src/mid.txt"),
    ):
        if before:
            edit(root, before, len(rows))
        cpu = _children_cpu()
        seconds, ran = run(root)
        rows.append(Row(shape, scenario, tool, seconds, ran, _children_cpu() - cpu))
    if tool == "runner":
        seconds, _ = timed(runner_cmd("validate", "pipeline.yaml"), root)
        rows.append(Row(shape, "validate", tool, seconds))
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


def table(rows: list[Row], tools: list[str]) -> str:
    keyed = {(r.shape, r.scenario, r.tool): r for r in rows}
    head = f"{'shape':<12}{'scenario':<10}" + "".join(f"{t + ' s':>12}" for t in tools)
    head += f"{'ran':>7}" + "".join(f"{'runner/' + t:>14}" for t in tools if t != "runner")
    lines = [head, "-" * len(head)]
    seen = []
    for r in rows:
        if (r.shape, r.scenario) in seen:
            continue
        seen.append((r.shape, r.scenario))
        cells, ratio = "", ""
        mine = keyed.get((r.shape, r.scenario, "runner"))
        for t in tools:
            other = keyed.get((r.shape, r.scenario, t))
            cells += f"{other.seconds:>12.3f}" if other else f"{'-':>12}"
            if t != "runner":
                if other is not None and mine is not None and other.seconds > 0:
                    ratio += f"{mine.seconds / other.seconds:>13.1f}x"
                else:
                    ratio += f"{'-':>14}"
        ran = mine.ran if mine and mine.ran is not None else "-"
        lines.append(f"{r.shape:<12}{r.scenario:<10}{cells}{ran!s:>7}{ratio}")
    return "\n".join(lines)


def targets(rows: list[Row], n: int) -> list[str]:
    """The issue's cold-run targets, and what the engine costs over the spawn floor."""
    keyed = {(r.shape, r.scenario, r.tool): r.seconds for r in rows}
    lines = []
    for shape in ("chain", "fan"):
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
    fan, serial = keyed.get(("fan", "cold", "runner")), keyed.get(("fan", "cold", "doit-1"))
    if fan and serial:
        lines.append(
            f"target fan cold --jobs 2 >= 1.6x faster than doit serial: {serial / fan:.2f}x"
        )
    fan_make = keyed.get(("fan", "cold", "make"))
    if fan and fan_make:
        lines.append(f"target fan cold <= 1.3x make -j2: {fan / fan_make:.2f}x")
    # Cores busy: CPU seconds (user + system, the process and every child it waited for) over
    # wall seconds. With 2 jobs a tool that keeps both commands running all the time nears 2.
    busy = [
        f"{r.tool} {r.cpu / r.seconds:.2f} (cpu {r.cpu:.2f} s)"
        for r in rows
        if r.shape == "fan" and r.scenario == "cold" and r.cpu is not None and r.seconds > 0
    ]
    if busy:
        lines.append("fan cold, cores busy (target runner >= 1.8): " + ", ".join(busy))
    return lines


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
        default="chain,fan,hash",
        help="comma-separated subset of chain,fan,hash (default all)",
    )
    args = parser.parse_args()
    n = 100 if args.quick else args.n
    tools = ["runner", "make"]
    runs: dict[str, Callable[[Path], tuple[float, int | None]]] = {
        "runner": run_runner,
        "make": run_make,
    }
    notes = []
    if doit_cmd() is not None:
        tools += ["doit", "doit-1"]
        runs["doit"] = run_doit
        runs["doit-1"] = run_doit_serial
    else:
        notes.append("doit: not installed (neither on PATH nor importable); column skipped")
    if not os.access(MAKE, os.X_OK):
        tools.remove("make")
        notes.append(f"make: {MAKE} not found; column skipped")
    tools.append("floor")
    runs["floor"] = run_floor
    cache_bytecode()
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
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp:
        base = Path(tmp)
        for shape in args.shapes.split(","):
            for tool in tools:
                if shape == "hash" and tool != "runner":
                    continue  # in-process steps have no make/doit equivalent
                rows.extend(scenarios(shape, tool, runs[tool], n, base))
                print(f"  done {shape} with {tool}", file=sys.stderr)
        if "hash" in args.shapes:
            rows.append(validate_big(base, 1000 if args.quick else 10_000))
    print(
        f"N={n} steps per shape, {JOBS} jobs, {os.cpu_count()} cores, "
        f"python {sys.version.split()[0]}"
    )
    print(table(rows, tools))
    for line in targets(rows, n):
        print(line)
    for note in notes:
        print("note:", note)


if __name__ == "__main__":
    main()
