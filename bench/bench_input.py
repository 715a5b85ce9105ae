"""Benchmark: hostile input (issue 16 §13-14), this checkout side by side with a baseline one.

Each case is one whole `runner validate` or `runner apply` process in a fresh directory, run
under a memory cap (RLIMIT_AS, default 3 GB, so a baseline that would take 4 GB fails instead of
starving the machine) and a wall-time cap. For each it prints the wall time, the peak resident
memory (ru_maxrss of that process) and the outcome: `refused` (exit 2, or the step failed with
a clean message), `ok` (it ran), `MemoryError`, `killed`, `timeout`, `traceback`.

Cases:
  validate_10k     not hostile: `runner validate` of bench_core's 10,000-step hash chain
  alias_bomb       the 633-byte billion-laughs pipeline (`runner validate`)
  alias_bomb_data  a 377-byte billion-laughs data file read with `read {as: yaml}` (apply)
  tojson_indent    `[1] * 10000 | tojson(indent=1000000)` (apply)
  literal_47mb     a pipeline holding a 47 MB flow-sequence literal (`runner validate`)
  join_range       `[1] * 10000 | join('x' * 1000000)` (apply)
  format_widths    2,000 `%999999s` specs in one format string (apply)
  translate        `'x' * 100000` translated with 'x' -> 1,000,000 characters (apply)
  split_words      `('x ' * 8000000).split()` (apply)

Run (this checkout only, or side by side with another checkout's source tree):
    .venv/bin/python bench/bench_input.py
    git worktree add /tmp/base <commit> && .venv/bin/python bench/bench_input.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _bomb_pipeline() -> str:
    # The classic: 9 levels of 9 aliases, 10^9 strings once expanded (633 bytes).
    lines = ["runner: 1", "name: bomb", "steps:", "  a:", "    uses: template", "    with:",
             "      text: hi", "      vars:",
             '        a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        p, c = chr(96 + i), chr(97 + i)
        lines.append(f"        {c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _bomb_data() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, 10):
        p, c = chr(96 + i), chr(97 + i)
        text += f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n"
    return text


def _expression_pipeline(expr: str) -> str:
    return (
        "runner: 1\nname: big\nsteps:\n  a:\n    uses: template\n    with:\n"
        f'      text: "{{{{ v | length }}}}"\n      vars: {{v: "${{{{ {expr} }}}}"}}\n'
    )


def _literal_47mb() -> str:
    n = 6_000_000
    items = ", ".join(str(1_000_000 + i) for i in range(n))  # 8 bytes each: ~48 MB
    return (
        "runner: 1\nname: big\nsteps:\n  a:\n    uses: template\n    with:\n"
        f"      text: hi\n      vars: {{v: [{items}]}}\n"
    )


Setup = Callable[[Path], list[str]]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def case_alias_bomb(root: Path) -> list[str]:
    _write(root, {"pipeline.yaml": _bomb_pipeline()})
    return ["validate", "pipeline.yaml"]


def case_alias_bomb_data(root: Path) -> list[str]:
    _write(root, {
        "data/bomb.yaml": _bomb_data(),
        "pipeline.yaml": "runner: 1\nname: bombdata\nsteps:\n  load:\n    uses: read\n"
                         "    with: {path: data/bomb.yaml, as: yaml}\n",
    })
    return ["apply", "pipeline.yaml", "--json", "--state", str(root / "state")]


def _expr_case(expr: str) -> Setup:
    def setup(root: Path) -> list[str]:
        _write(root, {"pipeline.yaml": _expression_pipeline(expr)})
        return ["apply", "pipeline.yaml", "--json", "--state", str(root / "state")]

    return setup


def case_literal_47mb(root: Path) -> list[str]:
    _write(root, {"pipeline.yaml": _literal_47mb()})
    return ["validate", "pipeline.yaml"]


def case_validate_10k(root: Path) -> list[str]:
    """Not hostile: bench_core's 10,000-step hash chain, to show reading did not get slower."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_core import write_hash

    write_hash(root, 10_000)
    return ["validate", "pipeline.yaml"]


CASES: dict[str, Setup] = {
    "validate_10k": case_validate_10k,
    "alias_bomb": case_alias_bomb,
    "alias_bomb_data": case_alias_bomb_data,
    "tojson_indent": _expr_case("([1] * 10000) | tojson(indent=1000000)"),
    "literal_47mb": case_literal_47mb,
    "join_range": _expr_case("([1] * 10000) | join('x' * 1000000)"),
    "format_widths": _expr_case("('%999999s' * 2000) | format(*([1] * 2000))"),
    "translate": _expr_case("('x' * 100000).translate({120: 'y' * 1000000})"),
    "split_words": _expr_case("('x ' * 8000000).split()"),
}


def run_case(src: Path, name: str, cap_mb: int, timeout: float) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["RUNNER_SERVER"] = "0"  # each process does its own work (see bench_core.ENV)
    env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        args = CASES[name](root)

        def limit() -> None:
            cap = cap_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", *args],
            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=limit,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            status = None
        seconds = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    text = err.decode("utf-8", "replace")
    if status is None:
        outcome = "timeout"
    elif "MemoryError" in text:
        outcome = "MemoryError"
    elif "Traceback" in text:
        outcome = "traceback"
    elif status < 0:
        outcome = "killed"
    elif status == 2 or (status == 4 and "Traceback" not in text):
        outcome = "refused"
    elif status == 0:
        outcome = "ok"
    else:
        outcome = f"exit {status}"
    first = next((ln for ln in text.splitlines() if "error" in ln or "FAILED" in ln), "")
    del out
    return {"case": name, "seconds": seconds, "peak_mb": peak_mb, "outcome": outcome,
            "message": first.strip()[:110]}


def measure(src: Path, name: str, cap_mb: int, timeout: float) -> dict[str, object]:
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: each case runs in a fresh
    # interpreter of this script, so the figure is that one process's peak.
    here, tree = str(Path(__file__).parent), str(src)
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import bench_input as b; "
        f"print(json.dumps(b.run_case(__import__('pathlib').Path({tree!r}), {name!r}, "
        f"{cap_mb}, {timeout})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout's source tree")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--cap-mb", type=int, default=3072)
    parser.add_argument("--timeout", type=float, default=120.0)
    opts = parser.parse_args()
    trees = {"this": HERE}
    if opts.baseline:
        trees = {"baseline": opts.baseline.resolve(), "this": HERE}
    for tree in trees.values():
        compileall.compile_dir(str(tree / "runner"), quiet=1)
    print(f"memory cap {opts.cap_mb} MB, time cap {opts.timeout:g} s; "
          f"baseline: {trees.get('baseline', '-')}")
    print(f"{'case':<16} " + " ".join(f"{t + ' s':>12} {t + ' MB':>12} {t:>12}" for t in trees))
    for name in opts.cases.split(","):
        row = {t: measure(src, name, opts.cap_mb, opts.timeout) for t, src in trees.items()}
        cells = " ".join(
            f"{r['seconds']:>12.2f} {r['peak_mb']:>12.0f} {r['outcome']:>12}" for r in row.values()
        )
        print(f"{name:<16} {cells}", flush=True)
        for t, r in row.items():
            print(f"  {t}: {r['message']}", file=sys.stderr)


if __name__ == "__main__":
    main()
