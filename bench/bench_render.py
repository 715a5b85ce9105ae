"""Render benchmark: every prompt of a generated 200-step pipeline (template steps).

Run: python bench/bench_render.py [STEPS]   (prints the whole-process time of
`runner render --json`, i.e. start-up + load + compile + run on a scratch state + render, and
the in-process time of render_pipeline for comparison)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_pipeline(directory: Path, steps: int) -> Path:
    """A pipeline of ``steps`` template steps; every fifth one also reads the previous text."""
    (directory / "prompts").mkdir()
    (directory / "prompts" / "shot.j2").write_text(
        "Shot {{ n }} of {{ title }}.\n{% for tag in tags %}- {{ tag }}\n{% endfor %}"
        "{% if before %}After: {{ before | truncate(40) }}\n{% endif %}",
        encoding="utf-8",
    )
    lines = [
        "runner: 1",
        "name: bench-render",
        "params:",
        "  title: {type: string, default: Bench}",
        "steps:",
    ]
    for i in range(steps):
        before = f'"${{{{ steps.s{i - 1}.output.text }}}}"' if i and i % 5 == 0 else '""'
        lines += [
            f"  s{i}:",
            "    uses: template",
            "    with:",
            "      template: prompts/shot.j2",
            f'      vars: {{n: {i}, title: "${{{{ params.title }}}}", tags: [a{i}, b{i}],'
            f" before: {before}}}",
        ]
    path = directory / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def whole_process(path: Path) -> tuple[float, int]:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "runner", "render", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=path.parent,
    )
    elapsed = time.perf_counter() - started
    return elapsed, len(json.loads(out.stdout)["renders"])


def in_process(path: Path) -> float:
    from runner.engine.plan.render import render_pipeline

    started = time.perf_counter()
    render_pipeline(path)
    return time.perf_counter() - started


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp:
        path = write_pipeline(Path(tmp), steps)
        runs = [whole_process(path) for _ in range(3)]
        count = runs[0][1]
        assert count == steps, f"rendered {count} of {steps} prompts"
        wall = statistics.median(r[0] for r in runs)
        inproc = statistics.median(in_process(path) for _ in range(3))
        assert not (Path(tmp) / ".runner").exists(), "render touched the pipeline's .runner/"
    print(
        f"render {steps} template steps: whole process {wall:.2f} s (median of 3), "
        f"in process {inproc:.2f} s, {wall / steps * 1000:.1f} ms per prompt"
    )


if __name__ == "__main__":
    main()
