"""Compiling ``${{ }}`` expressions once, when the pipeline compiles, and evaluating them under
the sandbox's budget.

A plain dotted lookup is compiled and answered without Jinja (lookup.py), and so is a plain
expression (comparisons, and/or/not, literals, lookups, a few filters: plain.py) whenever its
values are plain data: Jinja, the sandbox and the shape cache are imported when the first other
expression is compiled or evaluated (~15 ms of a start-up).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ExpressionError, Location
from .budget import BUDGET, MAX_SECONDS, Budget
from .lookup import (
    KEYWORDS,
    MAX_EXPRESSION_CHARS,
    MAX_NESTING,
    SPECIAL_NAMES,
    Reference,
    clip,
    forbidden,
    reference,
    too_deep,
)
from .plain import GAVE_UP, PlainTree
from .plain import parse as parse_plain

if TYPE_CHECKING:
    from jinja2 import nodes

    from .sharing import CompiledSource, Lazy

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_LOOKUP = re.compile(
    rf"^\s*{_NAME}(?:\s*(?:\.{_NAME}|\[\s*(?:\d+|{_NAME}|'[^'\\]*'|\"[^\"\\]*\")\s*\]))*\s*$"
)
_DOTTED = re.compile(rf"\s*({_NAME}(?:\.{_NAME})*)\s*", re.ASCII)
_NO_VALUE: Any = object()


@dataclass
class Expression:
    """A compiled expression; ``refs`` are the names it reads, found at compile time.

    ``tree`` is the parsed Jinja node (read by linters, never evaluated directly). A plain
    dotted lookup (``steps.read.output.text``, most of what pipelines write) has a ``path``: it
    is evaluated by looking its names up in the data, and parsed and compiled by Jinja only
    when something else needs it (its tree, or an evaluation the direct lookup cannot answer).
    A plain expression (plain.py) has a ``plain`` tree: evaluated without Jinja when it can
    give Jinja's answer, by Jinja otherwise.
    """

    source: str
    where: Location | None
    refs: frozenset[Reference]
    _fn: Lazy | None = field(repr=False)
    path: tuple[str, ...] | None = None
    plain: PlainTree | None = field(default=None, repr=False)

    @property
    def tree(self) -> nodes.Expr | None:
        return self._compiled().expr

    @property
    def paths(self) -> list[tuple[Any, ...]]:
        """The names read with their constant attributes (``parsing.paths_of``)."""
        if self.path is not None:
            return [self.path]
        if self.plain is not None:
            return list(self.plain.paths)
        tree = self.tree
        if tree is None:
            return []
        from jinja2 import nodes

        from .parsing import paths_of

        return paths_of(nodes.Output([tree], lineno=1))

    def _compiled(self) -> Lazy:
        if self._fn is None:
            self._fn = _compile_source(self.source)[1]
        return self._fn

    def _run(self, context: Mapping[str, Any]) -> Any:
        # What jinja's TemplateExpression.__call__ does, minus copying the globals ChainMap
        # into every call (half the cost of a small `when`).
        from .sandbox import bounded_range

        template, render = self._compiled().render
        ctx = template.new_context({"range": bounded_range, **context}, shared=True)
        for _ in render(ctx):
            pass
        return ctx.vars["result"]

    def _looked_up(self, context: Mapping[str, Any]) -> Any:
        """The value of a dotted lookup when every name is a key of a plain dict, as the
        sandbox's getattr finds it (a key wins over a dict method); else _NO_VALUE, and the
        compiled expression answers (and words any error)."""
        assert self.path is not None
        name, *attrs = self.path
        value = context.get(name, _NO_VALUE)
        for attr in attrs:
            if type(value) is not dict or attr not in value:
                return _NO_VALUE
            value = value[attr]
        jinja2 = sys.modules.get("jinja2")  # no Undefined can exist before Jinja is imported
        return _NO_VALUE if jinja2 is not None and isinstance(value, jinja2.Undefined) else value

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """Evaluate under a fresh budget. Raises ExpressionError (refused, undefined, bad type)."""
        if self.path is not None:
            found = self._looked_up(context)
            if found is not _NO_VALUE:
                return found  # a lookup hands over existing data: neither sized nor copied
        if self.plain is not None:
            token = BUDGET.set(Budget(time.monotonic() + MAX_SECONDS))
            try:
                found = self.plain.evaluate(context)
            finally:
                BUDGET.reset(token)
            if found is not GAVE_UP:
                return found
        import jinja2

        from .results import NotJSON, as_json
        from .sandbox import SandboxRefused, check_size

        token = BUDGET.set(Budget(time.monotonic() + MAX_SECONDS))
        try:
            value = self._run(context)
            if isinstance(value, jinja2.Undefined):
                raise ExpressionError(f"'{clip(self.source)}' is undefined", where=self.where)
            # A plain lookup (`steps.read.output.data.shots`) hands over data that already
            # exists, however large; only values an expression produces are bounded.
            if not _LOOKUP.match(self.source):
                value = as_json(value)
                check_size(value)
        except NotJSON as exc:
            raise ExpressionError(f"'{clip(self.source)}' gave {exc}", where=self.where) from None
        except SandboxRefused as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.exceptions.SecurityError as exc:
            raise ExpressionError(f"expression refused: {exc}", where=self.where) from None
        except jinja2.UndefinedError as exc:
            raise ExpressionError(
                f"in '{clip(self.source)}': {exc.message}", where=self.where
            ) from None
        except RecursionError:
            raise ExpressionError(
                "expression refused: nesting too deep", where=self.where
            ) from None
        except (
            TypeError,
            ValueError,
            ZeroDivisionError,
            AttributeError,
            KeyError,
            IndexError,
            OverflowError,
            MemoryError,
        ) as exc:
            raise ExpressionError(
                f"in '{clip(self.source)}': {type(exc).__name__}: {exc}", where=self.where
            ) from None
        finally:
            BUDGET.reset(token)
        return value


def compile_expression(source: str, where: Location | None = None) -> Expression:
    """Parse and compile one expression. Raises ExpressionError with ``where`` on bad syntax."""
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"expression of {len(source)} characters is over the limit of {MAX_EXPRESSION_CHARS}",
            where=where,
        )
    if not source.strip():
        raise ExpressionError("empty expression", where=where)
    if too_deep(source):
        raise ExpressionError(
            f"expression refused: nesting deeper than {MAX_NESTING} brackets", where=where
        )
    path = _dotted(source)
    if path is not None:
        refs = frozenset({reference(path[0], path[1] if len(path) > 1 else None)})
        return Expression(source, where, refs, None, path)
    plain = parse_plain(source, _LOOKUP.match(source) is not None)
    if plain is not None:
        return Expression(source, where, plain.refs, None, None, plain)
    import jinja2

    try:
        refs, fn = _compile_source(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ExpressionError(
            f"invalid expression '{clip(source)}': {exc.message}", where=where
        ) from None
    except RecursionError:
        raise ExpressionError("expression refused: nesting too deep", where=where) from None
    return Expression(source, where, refs, fn)


def _dotted(source: str) -> tuple[str, ...] | None:
    """The names of a plain dotted lookup (``steps.a.output.text``), or None. Each name parses
    as itself in Jinja (no keyword, such as ``true`` or ``none``), and the first is neither one
    the sandbox forbids nor one Jinja's code treats specially (``self``, ``loop``): what Jinja's
    parse and name check would find is then known without them."""
    m = _DOTTED.fullmatch(source)
    if m is None:
        return None
    path = tuple(m.group(1).split("."))
    if forbidden(path[0]) or path[0] in SPECIAL_NAMES or any(n in KEYWORDS for n in path):
        return None
    return path


@functools.lru_cache(maxsize=4096)
def _compile_source(source: str) -> CompiledSource:
    from .sharing import compile_by_shape

    return compile_by_shape(source) or compile_parsed(source)


def compile_parsed(source: str) -> CompiledSource:
    # Parsing finds every error a pipeline author can make (syntax, unknown filter or test,
    # forbidden name); generating Python code costs ~10x more and waits for first use.
    from jinja2 import nodes

    from .parsing import check_names, parse, refs_of
    from .sharing import Lazy

    expr = parse(source)
    holder = nodes.Output([expr], lineno=1)  # find_all skips the node it starts from
    check_names(holder)
    return refs_of(holder), Lazy(expr)
