"""The step order (pipeline/order.py): dependencies first, then file order."""

from __future__ import annotations

from graphlib import TopologicalSorter
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner.pipeline.order import step_order


@given(st.lists(st.lists(st.integers(0, 40), max_size=4), min_size=1, max_size=25), st.randoms())
def test_steps_are_ordered_wave_by_wave_in_file_order(deps_of: list[list[int]], rnd: Any) -> None:
    """The compiler's order is graphlib's, each wave of ready steps sorted by file position."""
    ids = [f"s{i}" for i in range(len(deps_of))]  # s<i> may depend only on earlier ones
    steps = {
        sid: SimpleNamespace(deps=tuple(sorted({ids[d % i] for d in deps_of[i]} if i else ())))
        for i, sid in enumerate(ids)
    }
    shuffled = list(steps)
    rnd.shuffle(shuffled)  # the file order is not the dependency order
    in_file = {sid: steps[sid] for sid in shuffled}
    position = {sid: i for i, sid in enumerate(in_file)}
    ts: TopologicalSorter[str] = TopologicalSorter()
    for sid, s in in_file.items():
        ts.add(sid, *s.deps)
    ts.prepare()
    expected: list[str] = []
    while ts.is_active():
        ready = sorted(ts.get_ready(), key=position.__getitem__)
        expected.extend(ready)
        ts.done(*ready)
    assert step_order(None, in_file) == expected  # type: ignore[arg-type]
