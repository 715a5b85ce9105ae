"""Gates as a person reads them in a terminal: what waits, what to type, and every round so far.

Used by `runner apply` / `resume` / `decide` (the end of a run that stops at a gate) and by
`runner show` / `runs decisions` (the history). Text that came from a model or a reviewer is
made printable first: it never drives the terminal.
"""

from __future__ import annotations

import shlex
import textwrap
import time
import unicodedata
from collections.abc import Sequence
from typing import Any

WIDTH = 80
SHOW_LINES = 8  # lines of each shown value printed at a gate; the rest is one command away


def printable(text: str) -> str:
    """``text`` with control characters (ESC, CR, BEL...) written as escapes; newlines and
    tabs kept, so model output cannot move the cursor or retitle the terminal."""
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def as_yaml(value: Any) -> str:
    """A reviewer's input as YAML (block style, keys in the order given)."""
    import yaml

    text: str = yaml.safe_dump(
        value, allow_unicode=True, sort_keys=False, default_flow_style=False, width=WIDTH - 8
    )
    return text.removesuffix("...\n").rstrip("\n")


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return as_yaml(value)


def _wrapped(text: str, indent: int, width: int) -> list[str]:
    """Lines of ``text`` wrapped to fit ``width`` after an ``indent``-wide label column."""
    room = max(20, width - indent)
    out: list[str] = []
    for line in printable(text.rstrip()).splitlines() or [""]:
        out.extend(textwrap.wrap(line, room, replace_whitespace=False) or [""])
    return out


def show_lines(show: Any, *, limit: int | None, width: int = WIDTH) -> tuple[list[str], bool]:
    """A gate's ``show`` table as aligned ``label  value`` lines; (lines, whether cut)."""
    if not isinstance(show, dict):
        if show in (None, "", {}):
            return [], False
        show = {"show": show}
    label_w = min(16, max((len(str(k)) for k in show), default=0))
    lines: list[str] = []
    cut = False
    for k, v in show.items():
        body = _wrapped(_shown(v), 4 + label_w + 2, width)
        if limit is not None and len(body) > limit:
            more = len(body) - limit
            body = [*body[:limit], f"... ({more} more line{'s' if more != 1 else ''})"]
            cut = True
        label = printable(str(k))[:label_w]
        lines.append(f"    {label:<{label_w}}  {body[0]}")
        lines.extend(f"    {'':<{label_w}}  {b}" for b in body[1:])
    return lines, cut


def waiting_text(rows: Sequence[Any], run_id: str, *, width: int = WIDTH) -> str:
    """What a person needs when a run stops at gates: each pending gate, what it shows, and the
    exact `runner decide` commands. ``rows`` are the run's pending DecisionRows."""
    lines: list[str] = []
    for row in rows:
        summary = row.summary or {}
        lines.append("")
        lines.append(f"Waiting at gate '{row.gate}' (round {row.round})")
        if summary.get("summary"):
            lines.extend(f"  {s}" for s in _wrapped(str(summary["summary"]), 2, width))
        shown, cut = show_lines(summary.get("show"), limit=SHOW_LINES, width=width)
        lines.extend(shown)
        images = summary.get("images") or []
        if images:
            lines.append(f"    images  {len(images)} (see them with: runner serve)")
        if cut:
            lines.append(f"  All of it: runner runs decisions {run_id}")
        gate = shlex.quote(row.gate)
        lines.append("Decide with one of:")
        lines.append(f"  runner decide {run_id} {gate} approve")
        lines.append(f'  runner decide {run_id} {gate} reject --comment "why"')
        if summary.get("revise"):
            lines.append(f'  runner decide {run_id} {gate} revise --input feedback="..."')
    return "\n".join(lines) + ("\n" if lines else "")


def rounds_lines(rows: Sequence[dict[str, Any]], *, width: int = WIDTH) -> list[str]:
    """Every round of every gate, oldest first, once each: an aligned table of gate, round,
    decision, who and when, then the comment and the revise input (as YAML) under it."""
    if not rows:
        return []
    head = ("gate", "round", "decision", "by", "when")
    cells = []
    for r in rows:
        what = r["decision"] or r["status"]
        if r["status"] == "superseded":
            what = "superseded"
        at = r["decided_at"] or r["requested_at"]
        cells.append(
            (printable(r["gate"]), str(r["round"]), what, printable(r["by"] or "-"), when(at))
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def row_text(values: Sequence[str]) -> str:
        return (
            "  "
            + "  ".join(
                f"{v:>{w}}" if i == 1 else f"{v:<{w}}"
                for i, (v, w) in enumerate(zip(values, widths, strict=True))
            ).rstrip()
        )

    lines = [row_text(head)]
    for r, c in zip(rows, cells, strict=True):
        lines.append(row_text(c))
        pad = 6
        source = (r.get("summary") or {}).get("remembered_from")
        if source:  # a decision this run was given again (same inputs), not asked for
            lines.append(f"{'':<{pad}}given again from run {printable(str(source))}")
        if r["comment"]:
            first, *rest = _wrapped(r["comment"], pad + 9, width)
            lines.append(f"{'':<{pad}}comment  {first}")
            lines.extend(f"{'':<{pad + 9}}{x}" for x in rest)
        if r["input"]:
            lines.append(f"{'':<{pad}}input:")
            lines.extend(
                f"{'':<{pad + 2}}{x}" for x in _wrapped(as_yaml(r["input"]), pad + 2, width)
            )
    return lines
