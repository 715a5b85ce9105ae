"""The DAG as text, Graphviz dot or Mermaid, grouped by phase."""

from __future__ import annotations

from .compiler import Plan


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


def graph_json(plan: Plan) -> dict[str, object]:
    """The DAG as data (what `runner graph` draws): phases with their steps, and the edges."""
    return {
        "phases": [
            {
                "phase": phase,
                "steps": [
                    {
                        "id": sid,
                        "uses": plan.steps[sid].uses,
                        "for_each": plan.steps[sid].for_each is not None,
                    }
                    for sid in sids
                ],
            }
            for phase, sids in _by_phase(plan)
        ],
        "edges": [[d, sid] for sid in plan.order for d in plan.steps[sid].deps],
    }


def render_graph(plan: Plan, fmt: str) -> str:
    lines: list[str] = []
    if fmt == "text":
        for phase, sids in _by_phase(plan):
            lines.append(f"[{phase or 'no phase'}]")
            for sid in sids:
                s = plan.steps[sid]
                deps = f" <- {', '.join(s.deps)}" if s.deps else ""
                each = " (for_each)" if s.for_each is not None else ""
                lines.append(f"  {sid} ({s.uses}){each}{deps}")
    elif fmt == "dot":
        lines.append(f'digraph "{plan.name}" {{')
        lines.append("  rankdir=LR;")
        for n, (phase, sids) in enumerate(_by_phase(plan)):
            lines.append(f"  subgraph cluster_{n} {{")
            lines.append(f'    label="{phase or "no phase"}";')
            for sid in sids:
                lines.append(f'    {_id(sid)} [label="{sid}\\n({plan.steps[sid].uses})"];')
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
                lines.append(f'    {_id(sid)}["{sid} ({plan.steps[sid].uses})"]')
            lines.append("  end")
        for sid in plan.order:
            for d in plan.steps[sid].deps:
                lines.append(f"  {_id(d)} --> {_id(sid)}")
    else:
        raise ValueError(f"unknown graph format {fmt}")
    return "\n".join(lines) + "\n"
