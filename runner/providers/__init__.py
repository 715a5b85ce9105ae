"""Model providers: the interface, the registry, project configuration and the built-ins.

Importing this package is cheap: the HTTP providers (httpx) and the fake (Pillow) are imported
only when a provider of that kind is created.
"""

from __future__ import annotations

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
from .redact import Redactor
from .registry import create, list_providers
from .retry import call_with_retries

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
