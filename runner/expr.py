"""One expression language for ``${{ }}``, ``when``, ``check`` and templates.

Jinja2 expressions, compiled once when the pipeline compiles and evaluated in a hardened
ImmutableSandboxedEnvironment: StrictUndefined, no globals but a bounded ``range``, huge powers,
repetitions, ranges and widths refused, and the size of every result bounded. Values that come
from data (an LLM reply, a document) are only ever passed in as variables, never compiled.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import ExpressionError, Location, TemplateError

MAX_EXPRESSION_CHARS = 20_000
MAX_RANGE = 10_000
MAX_INT_ARG = 1_000_000
MAX_RESULT_CHARS = 4_000_000
MAX_POWER_BITS = 4_096
MAX_NESTING = 200

_REF = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_FORMAT_WIDTH = re.compile(r"[%{][^%{}]*?\d{7,}")


class SandboxRefused(Exception):
    """An operation the sandbox will not do (too big, not allowed)."""


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SandboxRefused(f"range of {len(r)} elements is over the limit of {MAX_RANGE}")
    return r


def _check_size(value: object) -> None:
    if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > MAX_RESULT_CHARS:
        raise SandboxRefused(f"result of {len(value)} elements is over the limit")


def _check_args(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_INT_ARG:
            raise SandboxRefused(f"argument {a} is over the limit of {MAX_INT_ARG}")
        if isinstance(a, str) and _FORMAT_WIDTH.search(a):
            raise SandboxRefused("a format width over the limit")


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _check_args(args[1:], kwargs)
        if args and isinstance(args[0], str) and _FORMAT_WIDTH.search(args[0]):
            if fn.__name__ in ("do_format", "format"):
                raise SandboxRefused("a format width over the limit")
        result = fn(*args, **kwargs)
        _check_size(result)
        return result

    return guarded


class HardenedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with operand limits (Jinja's own sandbox bounds range() only)."""

    intercepted_binops = frozenset(["**", "*", "+", "//", "%"])

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("undefined", jinja2.StrictUndefined)
        kwargs.setdefault("autoescape", False)
        kwargs.setdefault("keep_trailing_newline", True)
        super().__init__(**kwargs)
        self.globals.clear()
        self.globals["range"] = _bounded_range
        for name in ("lipsum", "cycler", "joiner", "namespace", "dict"):
            self.globals.pop(name, None)
        self.filters = {name: _guard(fn) for name, fn in self.filters.items()}
        self.tests = dict(self.tests)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                lbits = abs(left).bit_length() if isinstance(left, int) else 64
                if right > 0 and lbits * float(right) > MAX_POWER_BITS:
                    raise SandboxRefused("power result would be too large")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    if len(seq) * n > MAX_RESULT_CHARS:
                        raise SandboxRefused("repetition result would be too large")
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_POWER_BITS:
                    raise SandboxRefused("product would be too large")
        elif operator == "%" and isinstance(left, str):
            if _FORMAT_WIDTH.search(left):
                raise SandboxRefused("a format width over the limit")
        result = super().call_binop(context, operator, left, right)
        _check_size(result)
        return result

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_args(args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        _check_size(result)
        return result


_ENV: HardenedEnvironment | None = None


def environment() -> HardenedEnvironment:
    global _ENV  # one parser-and-compiler cache per process; it holds no run state
    if _ENV is None:
        _ENV = HardenedEnvironment()
    return _ENV


@dataclass(frozen=True)
class Reference:
    """A name an expression reads: ``params.title`` -> ("params", "title")."""

    root: str
    attr: str | None


@dataclass
class Expression:
    """A compiled expression; ``refs`` are the names it reads, found at compile time."""

    source: str
    where: Location | None
    refs: frozenset[Reference]
    _fn: Callable[..., Any] = field(repr=False)

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        try:
            value = self._fn(**context)
        except SandboxRefused as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.exceptions.SecurityError as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.UndefinedError as exc:
            raise ExpressionError(
                f"in '{_clip(self.source)}': {exc.message}", where=self.where
            ) from None
        except RecursionError:
            raise ExpressionError("expression refused: nesting too deep", where=self.where) from None
        except (TypeError, ValueError, ZeroDivisionError, AttributeError, KeyError,
                IndexError, OverflowError, MemoryError) as exc:
            raise ExpressionError(
                f"in '{_clip(self.source)}': {type(exc).__name__}: {exc}", where=self.where
            ) from None
        if isinstance(value, jinja2.Undefined):
            raise ExpressionError(f"'{_clip(self.source)}' is undefined", where=self.where)
        _check_size_or_raise(value, self.where)
        return value


def _check_size_or_raise(value: object, where: Location | None) -> None:
    try:
        _check_size(value)
    except SandboxRefused as exc:
        raise ExpressionError(f"expression refused: {exc}", where=where) from None


def _clip(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _refs(tree: nodes.Node) -> frozenset[Reference]:
    found: set[Reference] = set()
    attrs: set[int] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        inner = node.node
        if isinstance(inner, nodes.Name) and inner.ctx == "load":
            attr: str | None = None
            if isinstance(node, nodes.Getattr):
                attr = node.attr
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                attr = node.arg.value
            found.add(Reference(inner.name, attr))
            attrs.add(id(inner))
    for name in tree.find_all(nodes.Name):
        if name.ctx == "load" and id(name) not in attrs:
            found.add(Reference(name.name, None))
    return frozenset(found)


def _depth(source: str) -> int:
    depth = best = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    return best


def compile_expression(source: str, where: Location | None = None) -> Expression:
    """Parse and compile one expression. Raises ExpressionError with ``where`` on bad syntax."""
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"expression of {len(source)} characters is over the limit of {MAX_EXPRESSION_CHARS}",
            where=where,
        )
    if not source.strip():
        raise ExpressionError("empty expression", where=where)
    if _depth(source) > MAX_NESTING:
        raise ExpressionError("expression refused: nesting too deep", where=where)
    env = environment()
    try:
        tree = env.parse("{{ (" + source + ") }}")
        fn = env.compile_expression(source, undefined_to_none=False)
    except jinja2.TemplateSyntaxError as exc:
        raise ExpressionError(
            f"invalid expression '{_clip(source)}': {exc.message}", where=where
        ) from None
    except RecursionError:
        raise ExpressionError("expression refused: nesting too deep", where=where) from None
    return Expression(source, where, _refs(tree), fn)


# -- values with ${{ }} inside ------------------------------------------------------------------


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
                out.append(_to_text(p.evaluate(context)))
        return "".join(out)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(value)
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


Compiled = Any  # a literal, an Expression, an Interpolation, or dict/list of those


def has_expression(text: str) -> bool:
    return "${{" in text


def compile_value(value: Any, where_of: Callable[[tuple[Any, ...]], Location | None],
                  path: tuple[Any, ...] = ()) -> Compiled:
    """Compile every ``${{ }}`` inside a YAML value; ``where_of(path)`` locates a sub-value."""
    if isinstance(value, str):
        if "${{" not in value:
            return value
        where = where_of(path)
        matches = list(_REF.finditer(value))
        if not matches or value.count("${{") != len(matches):
            raise ExpressionError(f"unterminated '${{{{' in '{_clip(value)}'", where=where)
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
    if isinstance(value, dict):
        return {k: compile_value(v, where_of, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [compile_value(v, where_of, (*path, i)) for i, v in enumerate(value)]
    return value


def evaluate_value(compiled: Compiled, context: Mapping[str, Any]) -> Any:
    if isinstance(compiled, (Expression, Interpolation)):
        return compiled.evaluate(context)
    if isinstance(compiled, dict):
        return {k: evaluate_value(v, context) for k, v in compiled.items()}
    if isinstance(compiled, list):
        return [evaluate_value(v, context) for v in compiled]
    return compiled


def iter_expressions(compiled: Compiled) -> Iterator[Expression]:
    if isinstance(compiled, Expression):
        yield compiled
    elif isinstance(compiled, Interpolation):
        yield from (p for p in compiled.parts if isinstance(p, Expression))
    elif isinstance(compiled, dict):
        for v in compiled.values():
            yield from iter_expressions(v)
    elif isinstance(compiled, list):
        for v in compiled:
            yield from iter_expressions(v)


def is_static(compiled: Compiled) -> bool:
    return next(iter_expressions(compiled), None) is None


# -- templates -----------------------------------------------------------------------------------


class _RootLoader(jinja2.FileSystemLoader):
    """Loads templates from the pipeline root only (includes cannot walk out of it)."""


def template_environment(
    root: Path, filters: Mapping[str, Callable[..., Any]] | None = None
) -> HardenedEnvironment:
    env = HardenedEnvironment(loader=_RootLoader(str(root)))
    for name, fn in (filters or {}).items():
        env.filters[name] = _guard(fn)
    return env


def render_template(
    env: HardenedEnvironment,
    *,
    name: str | None = None,
    text: str | None = None,
    variables: Mapping[str, Any],
    where: Location | None = None,
) -> str:
    """Render a template file (by name under the root) or inline text. Raises TemplateError."""
    label = name or "<inline>"
    try:
        tmpl = env.get_template(name) if name is not None else env.from_string(text or "")
        out = tmpl.render(**variables)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template not found: {exc.name}", where=where) from None
    except jinja2.TemplateSyntaxError as exc:
        loc = Location(exc.filename or label, exc.lineno or 0, 1)
        raise TemplateError(f"template syntax error: {exc.message}", where=loc) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            f"template {label}: {exc.message}", where=where,
            hint="pass it in `vars:` (templates see only what they are given)",
        ) from None
    except (SandboxRefused, jinja2.exceptions.SecurityError) as exc:
        raise TemplateError(f"template {label} refused: {exc}", where=where) from None
    except RecursionError:
        raise TemplateError(f"template {label} refused: nesting too deep", where=where) from None
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise TemplateError(f"template {label}: {type(exc).__name__}: {exc}", where=where) from None
    _check_size_or_raise(out, where)
    return out


def template_variables(env: HardenedEnvironment, source: str) -> set[str]:
    """Names a template reads (for compile-time checks of `vars:`)."""
    from jinja2 import meta

    return set(meta.find_undeclared_variables(env.parse(source)))
