"""What a plan cannot know before the apply runs, and how it notices: an upstream result that
would change is an ``Unknown`` (any use of it raises ``Touched``), a file a would-run step
rewrites hashes to ``Touched`` too (``PlanHasher``), and an argument is read alone
(``ArgReader``) so the others' unknowns do not hide it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import expr as ex
from ...errors import RunnerError
from ...pipeline.compiler import CompiledStep
from ...state.journal import Journal
from ..run.files import FileHasher


class Touched(Exception):
    """An expression read a result that is not known before the apply runs."""


class Unknown:
    """Stands for an upstream result that would be produced by the apply: any use raises."""

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def _touch(self, *_a: Any, **_k: Any) -> Any:
        raise Touched(self.source)

    __getattr__ = _touch
    __getitem__ = _touch
    __str__ = _touch
    __bool__ = _touch
    __len__ = _touch
    __iter__ = _touch
    __eq__ = _touch
    __lt__ = _touch
    __gt__ = _touch
    __add__ = _touch
    __contains__ = _touch
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<result of {self.source}, not known yet>"


def holds_unknown(value: Any) -> str | None:
    """The source of an Unknown anywhere inside ``value`` (a whole-value reference), or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is Unknown:
            return v.source
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return None


class PlanHasher(FileHasher):
    """File hashes as they would be during the apply, saving nothing.

    Files an earlier step would restore hash to their stored digest; files a would-run step
    writes are not known yet.
    """

    def __init__(self, journal: Journal | None) -> None:
        super().__init__(journal)
        self.overlay: dict[str, str] = {}  # path -> digest after restores
        self.pending: dict[str, str] = {}  # path -> step that would rewrite it

    def hash(self, path: Path | str, *, root: Path | None = None, used: bool = True) -> str:
        key = str(path)
        if key in self.pending:
            raise Touched(self.pending[key])
        if key in self.overlay:
            return self.overlay[key]
        return super().hash(path, root=root, used=used)

    def actual(self, path: Path) -> str:
        return super().hash(path)

    def flush(self) -> None:
        self.dirty = []  # a plan writes nothing, not even the stat cache


class ArgReader:
    """One argument of a step, evaluated alone (the others may depend on unknown results)."""

    def __init__(
        self, step: CompiledStep, ctx: dict[str, Any], args: Mapping[str, Any] | None
    ) -> None:
        self.step, self.ctx, self.args = step, ctx, args

    def get(self, name: str) -> Any:
        if self.args is not None:
            return self.args.get(name)
        raw = self.step.args.get(name) if isinstance(self.step.args, dict) else None
        try:
            value = ex.evaluate_value(raw, self.ctx)
        except (Touched, RunnerError):
            return None
        return None if holds_unknown(value) else value
