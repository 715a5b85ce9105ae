"""Values holding ``${{ }}``: a ``with:`` mapping compiled once, evaluated per element."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from ..errors import ExpressionError, Location

if TYPE_CHECKING:
    from .compiling import Expression

# jinja2 (behind .compiling) is imported only when a value holds ``${{ }}``: until then no
# Expression can exist, which is what _is_expression relies on.
_COMPILING = __name__.rpartition(".")[0] + ".compiling"


def _is_expression(value: Any) -> TypeGuard[Expression]:
    module = sys.modules.get(_COMPILING)
    return module is not None and isinstance(value, module.Expression)

_REF = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


@dataclass
class Interpolation:
    """A string with ``${{ }}`` parts: rendered to text."""

    parts: list[str | Expression]

    def evaluate(self, context: Mapping[str, Any]) -> str:
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            else:
                out.append(as_text(p.evaluate(context)))
        return "".join(out)


def as_text(value: Any) -> str:
    """A value as text, the one rule wherever a value becomes a string: inside a string with
    ``${{ }}``, and as an environment variable (`env:` of a command). true/false, a number as
    written, null as empty, a list or an object as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(value)
    if isinstance(value, (dict, list)):
        import json  # only for the rare list or dict rendered into text

        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


Compiled = Any  # a literal, an Expression, an Interpolation, or dict/list of those


def compile_value(
    value: Any, where_of: Callable[[tuple[Any, ...]], Location | None], path: tuple[Any, ...] = ()
) -> Compiled:
    """Compile every ``${{ }}`` inside a YAML value; ``where_of(path)`` locates a sub-value."""
    if isinstance(value, str):
        if "${{" not in value:
            return value
        from .compiling import compile_expression
        from .lookup import clip

        where = where_of(path)
        matches = list(_REF.finditer(value))
        if not matches or value.count("${{") != len(matches):
            raise ExpressionError(f"unterminated '${{{{' in '{clip(value)}'", where=where)
        if len(matches) == 1 and matches[0].span() == (0, len(value)):
            return compile_expression(matches[0].group(1).strip(), where)
        parts: list[str | Expression] = []
        pos = 0
        for m in matches:
            if m.start() > pos:
                parts.append(value[pos : m.start()])
            parts.append(compile_expression(m.group(1).strip(), where))
            pos = m.end()
        if pos < len(value):
            parts.append(value[pos:])
        return Interpolation(parts)
    # A plain string (most values) is its own compiled form: no call, no path built for it.
    if isinstance(value, dict):
        return {
            k: v if type(v) is str and "${{" not in v else compile_value(v, where_of, (*path, k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            v if type(v) is str and "${{" not in v else compile_value(v, where_of, (*path, i))
            for i, v in enumerate(value)
        ]
    return value


def evaluate_value(compiled: Compiled, context: Mapping[str, Any]) -> Any:
    if isinstance(compiled, Interpolation) or _is_expression(compiled):
        return compiled.evaluate(context)
    if isinstance(compiled, dict):
        return {k: evaluate_value(v, context) for k, v in compiled.items()}
    if isinstance(compiled, list):
        return [evaluate_value(v, context) for v in compiled]
    return compiled


def iter_expressions(compiled: Compiled) -> Iterator[Expression]:
    if _COMPILING not in sys.modules:  # no ``${{ }}`` compiled yet: no Expression to find
        return iter(())
    return _expressions(compiled)


def _expressions(compiled: Compiled) -> Iterator[Expression]:
    if _is_expression(compiled):
        yield compiled
    elif isinstance(compiled, Interpolation):
        yield from (p for p in compiled.parts if _is_expression(p))
    elif isinstance(compiled, dict):
        for v in compiled.values():
            yield from _expressions(v)
    elif isinstance(compiled, list):
        for v in compiled:
            yield from _expressions(v)


def is_static(compiled: Compiled) -> bool:
    return next(iter_expressions(compiled), None) is None
