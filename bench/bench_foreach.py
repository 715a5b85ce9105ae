"""Benchmark: a 10,000-element for_each of an in-process step (hash).

Prints the wall time, the per-element overhead of a cold run (every element runs) and of a warm
run (every element cached), and the peak resident memory (resource.getrusage) after each: a
process applies once, so each run's report is dropped before the next starts.

Run: python bench/bench_foreach.py [N]   (PYTHONPATH=<tree> measures another checkout: the tree
it imports is printed to stderr)
"""

from __future__ import annotations

import resource
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from runner.engine.run.apply import State, apply_plan
from runner.engine.run.options import ApplyOptions
from runner.pipeline.compiler import compile_pipeline


def main(n: int = 10_000) -> None:
    import runner

    print(f"runner from {Path(runner.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pipeline.yaml").write_text(
            textwrap.dedent(f"""\
            runner: 1
            name: bench
            params:
              n: {{type: integer, default: {n}}}
            steps:
              ids:
                uses: hash
                with: {{value: "${{{{ params.n }}}}"}}
              each:
                uses: hash
                for_each: "${{{{ [steps.ids.output.short] * params.n }}}}"
                concurrency: 64
                with: {{value: {{seed: "${{{{ item }}}}", index: "${{{{ index }}}}"}}}}
        """)
        )
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for label in ("cold", "warm"):
            plan = compile_pipeline(root / "pipeline.yaml")
            state = State.open(root / ".runner")
            t0 = time.perf_counter()
            report = apply_plan(plan, state, ApplyOptions())
            wall = time.perf_counter() - t0
            state.close()
            each = next(s for s in report.steps if s.id == "each")
            counts: dict[str, int] = {}
            for e in each.elements or []:
                counts[e.status.value] = counts.get(e.status.value, 0) + 1
            status = report.status.value
            del report, each  # what a process that applied once would hold no longer
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            print(
                f"{label}: {n} elements in {wall:.2f}s = {wall / n * 1e6:.0f} us/element "
                f"({counts}, run {status}), peak RSS so far {rss / 1024:.1f} MiB"
            )
        print(f"(RSS was {rss0 / 1024:.1f} MiB before the runs)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
