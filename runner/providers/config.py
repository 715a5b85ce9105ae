"""Project configuration of providers: ``runner.toml`` found by walking up from the pipeline.

```toml
[general]
default_provider = "fake"

[providers.openai]
base_url = "https://api.openai.com/v1"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"   # secrets come only from environment variables named *_env

[providers.sdxl]                  # a second instance of a provider type
type = "a1111"
base_url = "http://127.0.0.1:7860"
```

Without a file the default provider is ``fake``. Every ``<name>_env`` key names an environment
variable whose value becomes the secret ``<name>``; secret values never enter settings, hashes,
logs or messages (see Redactor).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Location
from ..source.redact import Redactor
from ..source.tomlfile import find_runner_toml, loads_toml
from .base import Provider, ProviderConfigError
from .registry import create

DEFAULT_PROVIDER = "fake"


@dataclass
class RunnerConfig:
    """The parsed config: the default provider and each provider section's settings."""

    path: Path | None = None
    default_provider: str = DEFAULT_PROVIDER
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # [cache]: see runner/state/remote.py

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()


def find_config(start: Path) -> Path | None:
    """The nearest ``runner.toml`` in ``start`` or a parent directory (up to the root)."""
    return find_runner_toml(start)


def load_config(path: Path | None) -> RunnerConfig:
    """Parse ``path`` (None -> defaults). Raises ProviderConfigError naming the file."""
    if path is None:
        return RunnerConfig()
    where = Location(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderConfigError(f"cannot read {path}: {exc}", where=where) from None
    try:
        data = loads_toml(text)
    except ValueError as exc:  # tomllib's TOMLDecodeError (loads_toml imports it when needed)
        raise ProviderConfigError(f"not valid TOML: {exc}", where=where) from None
    # [prices] and [budget] are read by runner/engine/plan/costs.py (plan's cost estimate), [cache]
    # by runner/state/remote.py, [executor] by runner/engine/run/executor_config.py.
    unknown = sorted(set(data) - {"general", "providers", "prices", "budget", "cache", "executor"})
    if unknown:
        raise ProviderConfigError(
            f"unknown section(s) {', '.join(unknown)}",
            where=where,
            hint="runner.toml has [general], [providers.<name>], [prices.<name>], [budget], "
            "[cache] and [executor]",
        )
    general = data.get("general", {})
    if not isinstance(general, dict) or set(general) - {"default_provider"}:
        raise ProviderConfigError("[general] accepts only default_provider", where=where)
    default = general.get("default_provider", DEFAULT_PROVIDER)
    if not isinstance(default, str) or not default:
        raise ProviderConfigError("default_provider must be a provider name", where=where)
    sections = data.get("providers", {})
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise ProviderConfigError("[providers] must hold [providers.<name>] tables", where=where)
    for name, settings in sections.items():
        for key, value in settings.items():
            if key.endswith("_env") and not isinstance(value, str):
                raise ProviderConfigError(
                    f"[providers.{name}] {key} must name an environment variable", where=where
                )
    cache = data.get("cache", {})
    if not isinstance(cache, dict):
        raise ProviderConfigError("[cache] must be a table", where=where)
    return RunnerConfig(
        path=path,
        default_provider=default,
        providers={k: dict(v) for k, v in sections.items()},
        cache=dict(cache),
    )


def resolve_secrets(settings: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """``{name: value}`` for every ``<name>_env`` setting whose variable is set."""
    out: dict[str, str] = {}
    for key, var in settings.items():
        if key.endswith("_env") and isinstance(var, str) and environ.get(var):
            out[key[: -len("_env")]] = environ[var]
    return out


class Providers:
    """Configured providers for one project; implements the steps' ProviderAccess protocol.

    Instances are created on first use and cached, so state such as the fake provider's
    transient-failure counters lives as long as this object.
    """

    def __init__(
        self,
        config: RunnerConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        keep_clients: bool = False,
    ) -> None:
        self.config = config or RunnerConfig()
        self._environ = dict(os.environ if environ is None else environ)
        self._instances: dict[str, Provider] = {}
        # A run keeps each provider's connections open until ``aclose`` (keep-alive).
        self._keep_clients = keep_clients

    @classmethod
    def for_dir(
        cls, start: Path, *, environ: Mapping[str, str] | None = None, keep_clients: bool = False
    ) -> Providers:
        """Providers configured by the ``runner.toml`` nearest to ``start`` (or the defaults)."""
        return cls(load_config(find_config(start)), environ=environ, keep_clients=keep_clients)

    async def aclose(self) -> None:
        """Close what the providers kept open (their HTTP clients); they reopen on next use."""
        for provider in self._instances.values():
            await provider.aclose()

    def default_name(self) -> str:
        return self.config.default_provider

    def _settings(self, name: str, type_name: str) -> dict[str, Any]:
        """Class defaults merged under the configured section, so *_env defaults count too."""
        from .registry import provider_class

        section = dict(self.config.providers.get(name, {}))
        section.pop("type", None)
        return {**provider_class(type_name).defaults, **section}

    def get(self, name: str | None) -> Provider:
        """The provider configured as ``name`` (None -> the default). Raises ProviderConfigError."""
        name = name or self.default_name()
        cached = self._instances.get(name)
        if cached is not None:
            return cached
        section = self.config.providers.get(name, {})
        type_name = section.get("type", name)
        if not isinstance(type_name, str):
            raise ProviderConfigError(f"[providers.{name}] type must be a provider name")
        settings = self._settings(name, type_name)
        where = Location(str(self.config.path)) if self.config.path else None
        try:
            provider = create(
                name,
                {k: v for k, v in section.items() if k != "type"},
                resolve_secrets(settings, self._environ),
                base_dir=self.config.base_dir,
                type_name=type_name,
            )
        except ProviderConfigError as exc:
            if exc.where is None:
                exc.where = where
            raise
        if self._keep_clients:
            provider.keep_clients()
        self._instances[name] = provider
        return provider

    @property
    def redactor(self) -> Redactor:
        """Masks the secrets of every configured provider (for logs and events)."""
        secrets: list[str] = []
        for name, section in self.config.providers.items():
            type_name = section.get("type", name)
            if isinstance(type_name, str):
                try:
                    settings = self._settings(name, type_name)
                except ProviderConfigError:
                    settings = section
                secrets.extend(resolve_secrets(settings, self._environ).values())
        for provider in self._instances.values():
            secrets.extend(provider.secrets.values())
        return Redactor(secrets)


def load_access(
    root: Path, *, environ: Mapping[str, str] | None = None, keep_clients: bool = False
) -> Providers:
    """The ProviderAccess for a pipeline rooted at ``root`` (nearest runner.toml, or defaults)."""
    return Providers.for_dir(root, environ=environ, keep_clients=keep_clients)
