"""The order steps run in: dependencies first, then file order; a cycle is an error naming its
path."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Protocol

from ..errors import InvalidPipeline

if TYPE_CHECKING:
    from .loader import PipelineDoc


class Ordered(Protocol):
    """A step as ordering sees it (compiler.CompiledStep, whose compiler imports this module)."""

    @property
    def deps(self) -> Collection[str]: ...


def step_order(doc: PipelineDoc, steps: Mapping[str, Ordered]) -> list[str]:
    """Topological order, stable by file order: wave after wave of the steps whose dependencies
    are all placed, each wave in file order. A cycle is an error naming its path."""
    waiting = {sid: len(s.deps) for sid, s in steps.items()}
    dependents: dict[str, list[str]] = {sid: [] for sid in steps}
    for sid, s in steps.items():
        for d in s.deps:
            dependents[d].append(sid)
    position = {sid: i for i, sid in enumerate(steps)}
    order: list[str] = []
    wave = [sid for sid, n in waiting.items() if n == 0]  # in file order already
    while wave:
        order.extend(wave)
        after: list[str] = []
        for sid in wave:
            for dep in dependents[sid]:
                waiting[dep] -= 1
                if waiting[dep] == 0:
                    after.append(dep)
        wave = sorted(after, key=position.__getitem__) if len(after) > 1 else after
    if len(order) < len(steps):
        _raise_cycle(doc, steps)
    return order


def _raise_cycle(doc: PipelineDoc, steps: Mapping[str, Ordered]) -> None:
    """Raises InvalidPipeline naming a dependency cycle of ``steps`` (graphlib finds it)."""
    from graphlib import CycleError, TopologicalSorter

    ts: TopologicalSorter[str] = TopologicalSorter()
    for sid, s in steps.items():
        ts.add(sid, *s.deps)
    try:
        ts.prepare()
    except CycleError as exc:
        cycle = list(exc.args[1])
        path = " -> ".join(cycle)
        raise InvalidPipeline(
            f"dependency cycle: {path}", where=doc.where("steps", cycle[0], key=True), step=cycle[0]
        ) from None
    raise AssertionError("steps left unordered without a cycle")  # pragma: no cover
