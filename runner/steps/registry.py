"""Step types by name: built-ins imported lazily, third parties through entry points."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from ..errors import InvalidPipeline
from .base import StepType

if TYPE_CHECKING:
    from importlib import metadata

ENTRY_POINT_GROUP = "runner.steps"

# name -> "module:Class"; imported only when a pipeline uses the type (start-up time matters).
BUILTINS: dict[str, str] = {
    "shell": "runner.steps.shell:ShellStep",
    "template": "runner.steps.template:TemplateStep",
    "hash": "runner.steps.hash:HashStep",
    "read": "runner.steps.read:ReadStep",
    "image": "runner.steps.image:ImageStep",
    "llm": "runner.steps.llm:LlmStep",
    "finalize": "runner.steps.finalize:FinalizeStep",
    "card": "runner.steps.card:CardStep",
    "verify_card": "runner.steps.verify_card:VerifyCardStep",
    "human_gate": "runner.steps.human_gate:HumanGateStep",
    "ingest": "runner.steps.ingest:IngestStep",
}


class StepRegistry:
    """Resolves step type names; one instance per process is enough (see ``default_registry``)."""

    def __init__(self) -> None:
        self._loaded: dict[str, StepType] = {}
        self._plugins: dict[str, metadata.EntryPoint] | None = None

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        if self._plugins is None:
            from importlib import metadata  # ~10 ms: only when a name is not a built-in

            self._plugins = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
        return self._plugins

    def names(self) -> list[str]:
        names = set(self._available_builtins()) | set(self._entry_points())
        return sorted(names)

    def _available_builtins(self) -> list[str]:
        out = []
        for name, target in BUILTINS.items():
            module = target.split(":")[0]
            if importlib.util.find_spec(module) is not None:
                out.append(name)
        return out

    def register(self, step_type: StepType) -> None:
        """Make a program's own step type (neither built in nor an entry point) usable by its
        name in this process. A Dask worker loads it from its module (executors.Job)."""
        self._loaded[step_type.name] = step_type

    def get(self, name: str) -> StepType | None:
        if name in self._loaded:
            return self._loaded[name]
        cls: Any = None
        if name in BUILTINS:
            module, attr = BUILTINS[name].split(":")
            try:
                cls = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                cls = None
        if cls is None:
            ep = self._entry_points().get(name)
            if ep is None:
                return None
            try:
                cls = ep.load()
            except Exception as exc:  # a broken plugin must not look like a missing one
                raise InvalidPipeline(f"step type plugin '{name}' failed to load: {exc}") from exc
        instance = cls() if isinstance(cls, type) else cls
        if not isinstance(instance, StepType):
            raise InvalidPipeline(f"step type plugin '{name}' is not a runner StepType")
        self._loaded[name] = instance
        return instance


_DEFAULT: StepRegistry | None = None


def default_registry() -> StepRegistry:
    global _DEFAULT  # entry points are read once per process
    if _DEFAULT is None:
        _DEFAULT = StepRegistry()
    return _DEFAULT


def describe(name: str, step_type: StepType) -> dict[str, Any]:
    """One step type as `runner steps --json` and the web API show it: its arguments (the JSON
    Schema of ``with:``) and its output fields."""
    return {
        "name": name,
        "version": step_type.version,
        "description": step_type.description,
        "requires_check": step_type.requires_check,
        "schema": step_type.schema,
        "output": dict(step_type.output_doc),
        "key_neutral": dict(step_type.key_neutral),
    }
