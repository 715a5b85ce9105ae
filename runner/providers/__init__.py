"""Model providers: the interface, the registry, project configuration and the built-ins.

Importing this package costs nothing: every name below is imported on first use (PEP 562), so
the engine can import ``runner.providers.limits`` on every run without loading the provider
machinery; the HTTP providers (httpx) and the fake (Pillow) load only when one is created.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..source.redact import Redactor
    from .base import (
        Capabilities,
        ImageRequest,
        ImageResult,
        Provider,
        ProviderConfigError,
        RetryPolicy,
        TextRequest,
        TextResult,
    )
    from .config import Providers, RunnerConfig, find_config, load_config
    from .registry import create, list_providers
    from .retry import call_with_retries

_WHERE = {
    "Capabilities": "base",
    "ImageRequest": "base",
    "ImageResult": "base",
    "Provider": "base",
    "ProviderConfigError": "base",
    "RetryPolicy": "base",
    "TextRequest": "base",
    "TextResult": "base",
    "Providers": "config",
    "RunnerConfig": "config",
    "find_config": "config",
    "load_config": "config",
    "Redactor": ".source.redact",  # the redactor lives with the secrets, in runner.source
    "create": "registry",
    "list_providers": "registry",
    "call_with_retries": "retry",
}

__all__ = [
    "Capabilities",
    "ImageRequest",
    "ImageResult",
    "Provider",
    "ProviderConfigError",
    "Providers",
    "Redactor",
    "RetryPolicy",
    "RunnerConfig",
    "TextRequest",
    "TextResult",
    "call_with_retries",
    "create",
    "find_config",
    "list_providers",
    "load_config",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'runner.providers' has no attribute '{name}'")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
