"""The DAG as text, Graphviz dot or Mermaid, grouped by phase; with a run's worker addresses
when its step bodies ran on a Dask cluster (``where``: step -> {address: executions})."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .compiler import Plan

Where = Mapping[str, Mapping[str, int]]


def where_text(workers: Mapping[str, int]) -> str:
    """``tcp://10.0.0.5:4711 (12), tcp://10.0.0.6:4711 (9)``: each worker and its executions.
    An address is data from the journal: anything but an address's characters shows as ``?``,
    so it cannot end a dot or Mermaid label early."""
    return ", ".join(
        f"{_ADDRESS_JUNK.sub('?', address)} ({n})" for address, n in sorted(workers.items())
    )


_ADDRESS_JUNK = re.compile(r"[^A-Za-z0-9:/._\-\[\]@%]")


def _by_phase(plan: Plan) -> list[tuple[str | None, list[str]]]:
    groups: dict[str | None, list[str]] = {p: [] for p in plan.phases}
    groups[None] = []
    for sid in plan.order:
        groups.setdefault(plan.steps[sid].phase, []).append(sid)
    out: list[tuple[str | None, list[str]]] = [(p, groups[p]) for p in plan.phases if groups[p]]
    if groups[None]:
        out.append((None, groups[None]))
    return out


def _id(sid: str) -> str:
    # Escape rather than replace, so `a-b` and `a_b` stay two nodes.
    return "s_" + "".join(c if c.isalnum() else f"_{ord(c):x}_" for c in sid)


def graph_json(plan: Plan, where: Where | None = None) -> dict[str, object]:
    """The DAG as data (what `runner graph` draws): phases with their steps (each with the
    workers it ran on, when ``where`` names any), and the edges."""
    where = where or {}
    return {
        "phases": [
            {
                "phase": phase,
                "steps": [
                    {
                        "id": sid,
                        "uses": plan.steps[sid].uses,
                        "for_each": plan.steps[sid].for_each is not None,
                        **({"workers": dict(where[sid])} if where.get(sid) else {}),
                    }
                    for sid in sids
                ],
            }
            for phase, sids in _by_phase(plan)
        ],
        "edges": [[d, sid] for sid in plan.order for d in plan.steps[sid].deps],
    }


def render_graph(plan: Plan, fmt: str, where: Where | None = None) -> str:
    where = where or {}
    lines: list[str] = []
    if fmt == "text":
        for phase, sids in _by_phase(plan):
            lines.append(f"[{phase or 'no phase'}]")
            for sid in sids:
                s = plan.steps[sid]
                deps = f" <- {', '.join(s.deps)}" if s.deps else ""
                each = " (for_each)" if s.for_each is not None else ""
                ran = f"  [on {where_text(where[sid])}]" if where.get(sid) else ""
                lines.append(f"  {sid} ({s.uses}){each}{deps}{ran}")
    elif fmt == "dot":
        lines.append(f'digraph "{plan.name}" {{')
        lines.append("  rankdir=LR;")
        for n, (phase, sids) in enumerate(_by_phase(plan)):
            lines.append(f"  subgraph cluster_{n} {{")
            lines.append(f'    label="{phase or "no phase"}";')
            for sid in sids:
                ran = f"\\non {where_text(where[sid])}" if where.get(sid) else ""
                lines.append(f'    {_id(sid)} [label="{sid}\\n({plan.steps[sid].uses}){ran}"];')
            lines.append("  }")
        for sid in plan.order:
            for d in plan.steps[sid].deps:
                lines.append(f"  {_id(d)} -> {_id(sid)};")
        lines.append("}")
    elif fmt == "mermaid":
        lines.append("flowchart LR")
        for phase, sids in _by_phase(plan):
            lines.append(f'  subgraph p_{_id(phase or "none")}["{phase or "no phase"}"]')
            for sid in sids:
                ran = f"<br>on {where_text(where[sid])}" if where.get(sid) else ""
                lines.append(f'    {_id(sid)}["{sid} ({plan.steps[sid].uses}){ran}"]')
            lines.append("  end")
        for sid in plan.order:
            for d in plan.steps[sid].deps:
                lines.append(f"  {_id(d)} --> {_id(sid)}")
    else:
        raise ValueError(f"unknown graph format {fmt}")
    return "\n".join(lines) + "\n"
