"""Rule benchmarks: evaluating a compiled when/check, and what compiling `when`s costs.

Run: python bench/bench_rules.py   (prints medians; the target is under 20 µs per evaluation)
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from runner.errors import Location
from runner.rules import RuleBook, compile_rule

CONTEXT: dict[str, Any] = {
    "params": {"n": 5, "mode": "full"},
    "steps": {"draft": {"output": {"ok": True, "label": "cat", "text": "hello " * 50}}},
}
ROOT = Path.cwd()


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


def main() -> None:
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

    n = 1000
    steps = {f"s{i}": f"${{{{ params.n > {i} and steps.draft.output.ok }}}}" for i in range(n)}
    started = time.perf_counter()
    book = RuleBook(where_of, {}, {}, ROOT)
    for sid, when in steps.items():
        book.add_step(sid, when=when)
    with_whens = time.perf_counter() - started
    started = time.perf_counter()
    for entry in book.steps.values():
        assert entry.when is not None
        entry.when.evaluate_sync(CONTEXT, root=ROOT)
    first = time.perf_counter() - started
    print(
        f"first evaluation of each (Python code generated on first use): "
        f"{first * 1000:8.1f} ms ({first / n * 1e6:.0f} µs each)"
    )
    started = time.perf_counter()
    book = RuleBook(where_of, {}, {}, ROOT)
    for sid in steps:
        book.add_step(sid)
    without = time.perf_counter() - started
    print(
        f"compile {n} `when` expressions: {with_whens * 1000:8.1f} ms "
        f"({with_whens / n * 1e6:.0f} µs each); {n} steps without: {without * 1000:.1f} ms"
    )
    started = time.perf_counter()
    book.lint({"n": "integer"})
    print(f"lint {n} steps: {(time.perf_counter() - started) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
