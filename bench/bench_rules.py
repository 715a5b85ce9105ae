"""Rule benchmarks: evaluating a compiled when/check, and what `when`s add to a compile.

Run: python bench/bench_rules.py [--samples N]

Targets: evaluating a compiled when/check under 20 µs (median); a 1,000-step pipeline with a
`when` on every step compiles in under 1.5x the time of the same pipeline without them.

The compile comparison uses two files that differ only in the `when:` lines: a chain of 1,000
`hash` steps, each reading the previous step's output (bench_core's `hash` shape, block style).
The `when`s vary per step as real ones do: a quarter compare a param with the step's index
(`params.n > 3`, 7 distinct texts), a quarter read the previous step (`steps.h0012.output.short
!= ''`), a quarter combine both, a quarter share one text. CPU time (time.process_time) is
reported because the machine is shared. Three figures:

- in-process (the target figure): load + compile_pipeline, after a warm-up compile; each sample
  renames every step (h0012 -> h03h0012 in one file, t03h0012 in the other), so no expression
  text was seen before and none comes from a cache, while one-time costs (imports, the Jinja
  environment, the 4 expression shapes) are left out: they would flatter the ratio. The heap is
  collected before, and the plan freed after, each measured compile.
- fresh process: the first compile in a new process (runner modules imported first), one-time
  costs included, as `runner validate` pays them.
- `runner validate` as a whole process (wall and CPU), bytecode cached in a temporary directory
  as an installed package has it.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runner.errors import Location
from runner.expr.rules import compile_rule

CONTEXT: dict[str, Any] = {
    "params": {"n": 5, "mode": "full"},
    "steps": {"draft": {"output": {"ok": True, "label": "cat", "text": "hello " * 50}}},
}
ROOT = Path.cwd()
STEPS = 1000


def where_of(path: tuple[Any, ...]) -> Location:
    return Location("bench.yaml", len(path), 1)


def compiled(raw: Any) -> Any:
    return compile_rule(raw, where_of=where_of, patterns={}, named={}, root=ROOT)


def median_us(fn: Any, runs: int = 20_000) -> float:
    for _ in range(1000):
        fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples) / 1000


def evaluation() -> None:
    cases = {
        "when: params.n > 3 and steps.draft.output.ok": "${{ params.n > 3 and steps.draft.output.ok }}",
        "check: output text length": "steps.draft.output.text|length > 100",
        "choice_in": {
            "choice_in": {"value": "${{ steps.draft.output.label }}", "choices": ["cat", "dog"]}
        },
        "all of 3 expressions": {
            "all": ["params.n > 3", "steps.draft.output.ok", "params.mode == 'full'"]
        },
    }
    print("evaluate (sync fast path), median of 20,000:")
    for label, raw in cases.items():
        rule = compiled(raw)
        assert rule.evaluate_sync(CONTEXT, root=ROOT).passed
        us = median_us(lambda rule=rule: rule.evaluate_sync(CONTEXT, root=ROOT))
        print(f"  {us:7.2f} µs  {label}")
    rule = compiled(cases["when: params.n > 3 and steps.draft.output.ok"])
    expression = next(rule.expressions())
    print(f"  {median_us(lambda: expression.evaluate(CONTEXT)):7.2f} µs  the bare Expression")


# -- compile: the same pipeline with and without a `when` on every step ---------------------------


def when_of(i: int, prefix: str = "h") -> str:
    previous = f"steps.{prefix}{i - 1:04d}.output.short"
    kind = i % 4
    if i == 0 or kind == 0:
        return f"${{{{ params.n > {i % 7} }}}}"
    if kind == 1:
        return f"${{{{ {previous} != '' }}}}"
    if kind == 2:
        return f"${{{{ params.mode == 'full' and {previous} }}}}"
    return "${{ params.n > 3 }}"


def pipeline(n: int, whens: bool, prefix: str = "h") -> str:
    lines = [
        "runner: 1\nname: whens\nparams:\n  n: {type: integer, default: 5}\n"
        "  mode: {type: string, default: full}\nsteps:\n"
        "  src:\n    uses: read\n    with:\n      path: in.txt\n"
    ]
    for i in range(n):
        previous = "steps.src.output.text" if i == 0 else f"steps.{prefix}{i - 1:04d}.output.short"
        lines.append(f"  {prefix}{i:04d}:\n    uses: hash\n")
        if whens:
            lines.append(f'    when: "{when_of(i, prefix)}"\n')
        lines.append(f'    with:\n      value: "${{{{ {previous} }}}}"\n')
    return "".join(lines)


_ONE_COMPILE = """
import sys, time
from pathlib import Path
import runner.pipeline.compiler, runner.expr.rules, runner.steps.registry
started = time.process_time()
runner.pipeline.compiler.compile_pipeline(Path(sys.argv[1]))
print(time.process_time() - started)
"""


def compile_seconds(file: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _ONE_COMPILE, str(file)], check=True, capture_output=True, text=True
    )
    return float(done.stdout)


def validate_seconds(file: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one `runner validate` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "runner", "validate", str(file)],
        check=True,
        capture_output=True,
        env=env,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def in_process(files: dict[str, Path], samples: int) -> dict[str, list[float]]:
    from runner.pipeline.compiler import compile_pipeline

    for file in files.values():
        compile_pipeline(file)  # imports, environment, shapes: once per process
    took: dict[str, list[float]] = {label: [] for label in files}
    for k in range(samples):  # alternated, so load on the machine hits both alike
        for label, file in files.items():
            # Ids differ between the two files too: the `with:` expressions of one must not
            # be cache hits for the other.
            file.write_text(pipeline(STEPS, label == "with", prefix=f"{label[-1]}{k:02d}h"))
            gc.collect()  # a sample does not pay for the garbage of the one before
            started = time.process_time()
            plan = compile_pipeline(file)
            took[label].append(time.process_time() - started)
            del plan  # freed outside the measurement
    return took


def fresh_processes(files: dict[str, Path], samples: int) -> dict[str, list[float]]:
    took: dict[str, list[float]] = {label: [] for label in files}
    for _ in range(samples):
        for label, file in files.items():
            took[label].append(compile_seconds(file))
    return took


def show(title: str, took: dict[str, list[float]]) -> None:
    ms = {label: statistics.median(s) * 1000 for label, s in took.items()}
    print(
        f"{title}:\n  with a `when` on every step {ms['with']:7.1f} ms\n"
        f"  without                     {ms['without']:7.1f} ms\n"
        f"  ratio {ms['with'] / ms['without']:.2f} (target < 1.5)"
    )


def compile_comparison(samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        files = {}
        for label, whens in (("with", True), ("without", False)):
            folder = base / label
            folder.mkdir()
            (folder / "in.txt").write_text("x\n")
            files[label] = folder / "pipeline.yaml"
            files[label].write_text(pipeline(STEPS, whens))
        what = f"load + compile of {STEPS} steps, CPU, median of {samples}"
        show(f"\nin-process ({what}, new step ids each)", in_process(files, samples))
        show(f"fresh process ({what}, first compile)", fresh_processes(files, samples))
        for label, file in files.items():
            file.write_text(pipeline(STEPS, label == "with"))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["RUNNER_SERVER"] = "0"  # each process does its own work (see bench_core.ENV)
        env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
        for file in files.values():
            validate_seconds(file, env)  # writes the bytecode cache
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label in files}
        for _ in range(samples):
            for label, file in files.items():
                runs[label].append(validate_seconds(file, env))
        print(f"`runner validate`, whole process, median of {samples}:")
        for label, rows in runs.items():
            wall = statistics.median(r[0] for r in rows) * 1000
            cpu = statistics.median(r[1] for r in rows) * 1000
            print(f"  {label:<8} wall {wall:7.1f} ms  CPU {cpu:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=9, help="compile samples (default 9)")
    args = parser.parse_args()
    evaluation()
    compile_comparison(args.samples)


if __name__ == "__main__":
    main()
