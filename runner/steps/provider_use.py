"""What the steps that call a provider share: the provider a step names (checked to make the
kind it asks for), the provider's own compile-time checks, and reference images read and checked
where the user's own name for them is known."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import Location, StepFailure, StoreError
from ..providers.base import Provider, ProviderConfigError
from ..providers.config import Providers
from ..source.beneath import read_beneath
from ..source.paths import inside
from .base import ProviderAccess, StepContext, StepEnv

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def provider_access(env: StepEnv) -> ProviderAccess:
    """The engine's providers, or the ones configured next to the pipeline when none is given."""
    return env.providers if env.providers is not None else Providers.for_dir(env.root)


def resolve_provider(env: StepEnv, name: str | None, kind: str, step: str | None) -> Provider:
    """The named (or default) provider, checked to produce ``kind``. Raises ProviderConfigError."""
    provider = provider_access(env).get(name)
    if not isinstance(provider, Provider):
        raise ProviderConfigError(f"provider '{name}' is not a runner Provider", step=step)
    if kind not in provider.capabilities.kinds:
        raise ProviderConfigError(
            f"provider '{provider.name}' does not generate {kind}s",
            step=step,
            hint="choose a provider whose capabilities list this kind (runner providers)",
        )
    return provider


def check_provider(args: Mapping[str, Any], root: Path, where: Location | None) -> None:
    """The provider's own compile-time checks for this step (a ComfyUI workflow and its
    substitutions, how many references it takes). Raises ProviderConfigError.

    A provider that cannot be resolved yet (a name given by an expression, a setting that only
    the run can check) is left to the run, which reports it.
    """
    name = args.get("provider")
    if isinstance(name, str) and "${{" in name:
        return
    try:
        provider = Providers.for_dir(root).get(name)
    except ProviderConfigError:
        return
    refs = args.get("references")
    count = len(refs) if isinstance(refs, list) else (0 if refs is None else None)
    provider.check(references=count, where=where)


def load_reference(ctx: StepContext, ref: str) -> bytes:
    """An object digest from the store, or a workspace path inside the pipeline root, checked
    to be a whole image here, where the user's own name for it is known (a provider's
    complaint would name its upload copy). Raises StepFailure, StoreError."""
    if _DIGEST.match(ref) and ctx.objects.has(ref):
        data = ctx.objects.read_bytes(ref)
    else:
        inside(ctx.root, ref, where=Location(ref))  # words a path that was never inside
        try:
            data = read_beneath(ctx.root, ref)  # as opened now: a directory may be swapped
        except OSError as exc:
            raise StoreError(f"reference image '{ref}' cannot be read: {exc}") from None
    from .imaging.finalize import FinalizeError
    from .imaging.intact import check_intact  # Pillow: only for steps with references

    try:
        check_intact(data)
    except FinalizeError as exc:
        raise StepFailure(f"reference image '{ref}' is not a usable image: {exc}") from None
    return data
