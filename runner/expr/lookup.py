"""What a plain dotted lookup (``steps.read.output.text``) needs, without Jinja.

Most expressions pipelines write are such lookups: compiling.py answers them by looking the
names up, and imports Jinja (~15 ms of a process's start) only for an expression that is not
one. The limits, names and references they share with the sandbox, the parser and the shape
cache live here; those modules re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_EXPRESSION_CHARS = 20_000
MAX_NESTING = 200
FORBIDDEN_NAMES = frozenset({"self"})

# Names Jinja's parser tests by value anywhere: they stay in a shape as written (shapes.py), and
# a source naming one is no plain lookup.
_KEYWORD_TEXT = (
    "and as autoescape block call context elif else endautoescape endblock endcall endfilter "
    "endfor endif endmacro endset endwith extends false False filter for from if ignore import "
    "in include is macro missing none None not or print raw recursive required scoped set true "
    "True with without"
)
KEYWORDS = frozenset(_KEYWORD_TEXT.split())

# Names Jinja's code generator treats specially (it declares `self` as a template reference;
# the rest have meanings inside loops, macros and blocks): an instance naming one is compiled
# on its own, as its code may differ from the shape's (sharing.py).
SPECIAL_NAMES = frozenset({"self", "loop", "caller", "varargs", "kwargs", "super"})


@dataclass(frozen=True)
class Reference:
    """A name an expression reads: ``params.title`` -> ("params", "title")."""

    root: str
    attr: str | None


_REFERENCES: dict[tuple[str, str | None], Reference] = {}


def reference(root: str, attr: str | None) -> Reference:
    """Reference(root, attr), shared: a frozen dataclass costs ~1 µs to build, and a pipeline
    names the same few roots and step ids over and over."""
    found = _REFERENCES.get((root, attr))
    if found is None:
        if len(_REFERENCES) > 65_536:
            _REFERENCES.clear()
        found = _REFERENCES[(root, attr)] = Reference(root, attr)
    return found


def forbidden(name: str) -> bool:
    """A name no expression or template may read (Jinja's template self, our own guards)."""
    return name in FORBIDDEN_NAMES or name.startswith("_runner")


def too_deep(source: str) -> bool:
    """Brackets nest deeper than MAX_NESTING (counting them first: the walk is per character)."""
    if len(source) <= MAX_NESTING:  # most expressions: too short to nest that deep
        return False
    if source.count("(") + source.count("[") + source.count("{") <= MAX_NESTING:
        return False
    return _depth(source) > MAX_NESTING


def _depth(source: str) -> int:
    depth = best = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def clip(text: str, n: int = 80) -> str:
    """``text`` on one line, cut to ``n`` characters (for messages)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
