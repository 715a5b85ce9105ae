"""A paid call's idempotency key: the digest of the canonical request it sends.

Every field of a request dataclass is keyed unless its field metadata says ``keyed=False`` (how
the call is made, never what it produces: the key itself, a timeout, a job handle, a tracker).
So a field added to a request joins its calls' keys by construction; nobody has to remember to
list it. Bytes are keyed by their sha256, so references count by content, not by path.

A key is of the request that goes on the wire: a field the provider never sends (``unsent``, its
``not_sent`` declaration) is left out, so changing it does not pay again for the very same
request.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection
from typing import Any

from ..state.canonical import digest

# Field metadata of a request field that does not decide the result.
NOT_KEYED: dict[str, Any] = {"keyed": False}


def keyed_fields(request_type: type) -> list[str]:
    """The names of a request dataclass's fields that join its calls' keys."""
    return [f.name for f in dataclasses.fields(request_type) if f.metadata.get("keyed", True)]


def canonical_request(request: Any, unsent: Collection[str] = ()) -> dict[str, Any]:
    """The request's keyed fields as canonical JSON values (bytes as sha256 hex), each under
    its field's ``key_name`` when one is given (a name kept from an earlier key format).
    ``unsent``: fields the provider never puts on the wire, left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(request):
        if f.metadata.get("keyed", True) and f.name not in unsent:
            out[f.metadata.get("key_name", f.name)] = _by_content(getattr(request, f.name))
    return out


def request_key(request: Any, profile: str, *scope: Any, unsent: Collection[str] = ()) -> str:
    """The call's key (32 hex chars): the canonical request (less its ``unsent`` fields), the
    provider profile, then any ``scope`` parts that narrow sharing (an ordinal for a seedless
    provider, a run id)."""
    return key_of(canonical_request(request, unsent), profile, *scope)


def key_of(canonical: dict[str, Any], profile: str, *scope: Any) -> str:
    """``request_key`` of a request whose ``canonical_request`` is at hand."""
    return digest([canonical, profile, *scope])[:32]


def _by_content(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(value).hexdigest()
    if isinstance(value, tuple | list):
        return [_by_content(v) for v in value]
    if isinstance(value, dict):
        return {k: _by_content(v) for k, v in value.items()}
    return value
