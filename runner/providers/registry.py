"""Which providers exist: built-ins by name (imported only when used) and entry-point plugins.

Third parties register ``name = "package.module:Class"`` in the ``runner.providers`` entry point
group; the class subclasses runner.providers.base.Provider.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .base import Capabilities, Provider, ProviderConfigError

ENTRY_POINT_GROUP = "runner.providers"

# Imported lazily: `runner --help` must not pay for httpx and Pillow.
BUILTINS: dict[str, str] = {
    "fake": "runner.providers.fake:FakeProvider",
    "openai": "runner.providers.openai:OpenAIProvider",
    "ollama": "runner.providers.ollama:OllamaProvider",
    "anthropic": "runner.providers.anthropic:AnthropicProvider",
    "a1111": "runner.providers.a1111:A1111Provider",
    "comfyui": "runner.providers.comfyui:ComfyUIProvider",
}


class ProviderInfo(NamedTuple):
    name: str
    capabilities: Capabilities
    version: str


def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points  # ~10 ms: only past the built-ins

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def names() -> list[str]:
    """Every installed provider name, built-ins first."""
    return [*BUILTINS, *sorted(n for n in _plugins() if n not in BUILTINS)]


def provider_class(name: str) -> type[Provider]:
    """The class registered under ``name``. Raises ProviderConfigError for an unknown name."""
    if name in BUILTINS:
        cls = _import(BUILTINS[name])
    else:
        ep = _plugins().get(name)
        if ep is None:
            raise ProviderConfigError(
                f"unknown provider '{name}'", hint=f"installed providers: {', '.join(names())}"
            )
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plugin must not take the CLI down with a traceback
            raise ProviderConfigError(f"provider plugin '{name}' failed to load: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderConfigError(f"provider '{name}' is not a runner Provider subclass")
    return cls


def list_providers() -> list[ProviderInfo]:
    """(name, capabilities, version) of every installed provider."""
    out = []
    for name in names():
        cls = provider_class(name)
        out.append(ProviderInfo(name, cls.default_capabilities, cls.version))
    return out


def create(
    name: str,
    settings: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    *,
    base_dir: Path | None = None,
    type_name: str | None = None,
) -> Provider:
    """An instance of provider ``type_name or name`` configured as ``name``.

    Raises ProviderConfigError for an unknown provider or invalid settings.
    """
    cls = provider_class(type_name or name)
    return cls(settings=settings, secrets=secrets, base_dir=base_dir, name=name)
