"""What `runner verify --rebuild` found: each re-run execution's verdict and, for one whose
output differs from the recorded one, where and how (runner/engine/run/rebuild.py does the
re-running).

Plain data: the CLI renders it as lines or one JSON document.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...state.canonical import canonical_json, sha256_hex, utf8

HINT_CHARS = 240  # a diff hint is a hint: the first changed lines, clipped
TEXT_LIMIT = 256 * 1024  # objects larger than this get no text diff
HEX = frozenset("0123456789abcdef")


class Verdict(enum.Enum):
    SAME = "same"  # rebuilt to exactly what was recorded
    DIFFERS = "differs"  # not deterministic: the rebuild made something else
    FAILED = "failed"  # the rebuild did not finish (the step failed where it once passed)
    SKIPPED = "skipped"  # not re-run (paid, a decision, an edit, the project changed, ...)

    @property
    def problem(self) -> bool:
        return self in (Verdict.DIFFERS, Verdict.FAILED)


@dataclass
class Difference:
    """One place where the rebuild differs: a file, the output's objects, an output field."""

    what: str
    recorded: str | None
    rebuilt: str | None
    hint: str = ""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "what": self.what,
            "recorded": self.recorded,
            "rebuilt": self.rebuilt,
        }
        if self.hint:
            doc["hint"] = self.hint
        return doc

    def line(self) -> str:
        text = f"{self.what}: recorded {_short(self.recorded)}, rebuilt {_short(self.rebuilt)}"
        return text + (f" ({self.hint})" if self.hint else "")


@dataclass
class Check:
    """One execution of a run (a step, or one for_each element) and what its rebuild gave."""

    run_id: str
    pipeline: str
    step: str
    element: int | None
    uses: str
    verdict: Verdict
    reason: str = ""
    differences: list[Difference] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.step + (f"[{self.element}]" if self.element is not None else "")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "run": self.run_id,
            "pipeline": self.pipeline,
            "step": self.step,
            "element": self.element,
            "uses": self.uses,
            "verdict": self.verdict.value,
        }
        if self.reason:
            doc["reason"] = self.reason
        if self.differences:
            doc["differences"] = [d.to_json() for d in self.differences]
        return doc


@dataclass
class RebuildReport:
    runs: list[dict[str, Any]] = field(default_factory=list)  # {id, pipeline, item}
    checks: list[Check] = field(default_factory=list)
    not_sampled: int = 0  # rebuildable executions left out of the sample

    def count(self, verdict: Verdict) -> int:
        return sum(1 for c in self.checks if c.verdict is verdict)

    @property
    def ok(self) -> bool:
        return not any(c.verdict.problem for c in self.checks)

    def summary(self) -> dict[str, int]:
        counts = {v.value: self.count(v) for v in Verdict}
        return {**counts, "not_sampled": self.not_sampled}

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "runs": self.runs,
            "summary": self.summary(),
            "checks": [c.to_json() for c in self.checks],
        }

    def lines(self) -> list[str]:
        out: list[str] = []
        skipped: dict[tuple[str, str, str, str], list[Check]] = {}  # by pipeline, step, reason
        for c in self.checks:
            where = f"run {c.run_id} step {c.label} ({c.uses})"
            if c.verdict is Verdict.DIFFERS:
                out.append(f"not deterministic: {where}")
                out.extend(f"  {d.line()}" for d in c.differences)
            elif c.verdict is Verdict.FAILED:
                out.append(f"rebuild failed: {where}: {c.reason}")
            elif c.verdict is Verdict.SKIPPED:  # one line per step and reason, not per element
                skipped.setdefault((c.pipeline, c.step, c.uses, c.reason), []).append(c)
        for (_, step, uses, reason), checks in skipped.items():
            runs = sorted({c.run_id for c in checks})
            where = (
                f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs of {checks[0].pipeline}"
            )
            elements = [c for c in checks if c.element is not None]
            many = f", {len(elements)} elements" if elements else ""
            out.append(f"skipped: {where} step {step} ({uses}{many}): {reason}")
        s = self.summary()
        tail = f", {s['not_sampled']} not in the sample (--all checks every one)"
        out.append(
            f"{'ok' if self.ok else 'FAILED'}: {s['same']} rebuilt the same, "
            f"{s['differs']} differ, {s['failed']} failed, {s['skipped']} skipped"
            + (tail if s["not_sampled"] else "")
        )
        return out


def _short(digest: str | None) -> str:
    if digest is None:
        return "nothing"
    return digest[:12] if len(digest) == 64 else digest


def compare(
    recorded: tuple[Any, list[str], dict[str, str]],
    rebuilt: tuple[Any, list[str], dict[str, str]],
    read: Callable[[str, bool], bytes | None],
) -> list[Difference]:
    """Where ``rebuilt`` (output, artifacts, files) differs from ``recorded``. ``read(digest,
    rebuilt)`` gives an object's bytes (for a text diff hint), None when not at hand."""
    (out_a, art_a, files_a), (out_b, art_b, files_b) = recorded, rebuilt
    diffs: list[Difference] = []
    for path in sorted(set(files_a) | set(files_b)):
        a, b = files_a.get(path), files_b.get(path)
        if a != b:
            diffs.append(Difference(f"file {path}", a, b, _bytes_hint(a, b, read)))
    said = {(d.recorded, d.rebuilt) for d in diffs}  # an output field naming a file's digest
    fields = [
        d for d in _field_diffs(out_a, out_b, "output") if (d.recorded, d.rebuilt) not in said
    ]
    diffs.extend(fields)
    extra_a, extra_b = sorted(set(art_a) - set(art_b)), sorted(set(art_b) - set(art_a))
    if (extra_a or extra_b) and not diffs:  # the output names its objects: said above
        a = extra_a[0] if extra_a else None
        b = extra_b[0] if extra_b else None
        diffs.append(Difference("objects of the output", a, b, _bytes_hint(a, b, read)))
    return diffs


def _field_diffs(a: Any, b: Any, where: str, limit: int = 5) -> list[Difference]:
    """The output's differing fields, deepest first found, at most ``limit``."""
    if canonical_json(a) == canonical_json(b):
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[Difference] = []
        for k in sorted(set(a) | set(b), key=str):
            if len(out) >= limit:
                break
            out.extend(_field_diffs(a.get(k), b.get(k), f"{where}.{k}", limit - len(out)))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if len(out) >= limit:
                break
            out.extend(_field_diffs(x, y, f"{where}[{i}]", limit - len(out)))
        return out
    if _is_digest(a) and _is_digest(b):  # an object's name: shown as it is
        return [Difference(where, a, b)]
    hint = _text_hint(a, b) if isinstance(a, str) and isinstance(b, str) else ""
    return [Difference(where, _value_digest(a), _value_digest(b), hint)]


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in HEX for c in value)


def _value_digest(value: Any) -> str | None:
    return None if value is None else sha256_hex(utf8(canonical_json(value)))


def _bytes_hint(a: str | None, b: str | None, read: Callable[[str, bool], bytes | None]) -> str:
    if a is None or b is None:
        return ""
    old, new = read(a, False), read(b, True)
    if old is None or new is None:
        return ""
    if len(old) > TEXT_LIMIT or len(new) > TEXT_LIMIT:
        return f"{len(old)} -> {len(new)} bytes"
    try:
        return _text_hint(old.decode("utf-8"), new.decode("utf-8"))
    except UnicodeDecodeError:
        return f"binary, {len(old)} -> {len(new)} bytes"


def _text_hint(old: str, new: str) -> str:
    """The first changed lines, as `-old +new`, clipped."""
    changed = [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    ]
    text = " | ".join(changed[:4])
    return text if len(text) <= HINT_CHARS else text[: HINT_CHARS - 3] + "..."
