"""Whether a result may go to the team's remote cache: one rule for an apply's pushes and for
`runner cache push`.

A result is kept back when its output or report names a local path (the project, the state, a
home directory: meaningless on another machine), or when it holds a secret runner knows
(source/secretmask.py), plain or encoded, in its output, its report or the bytes of any object
it names (a step that printed a key into a long stdout or wrote it to a declared file: the
object holds the raw key even where the journal row is masked). `runner cache push` reads
results back from the journal, where every secret was written as ``***`` when the apply
recorded it: a result whose output or report holds that mask is kept back as the apply kept it.
(An output that holds ``***`` of its own is kept back too: never shared is the safe way to be
wrong.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import StoreError
from ...source import secretmask
from ...state.backends import ObjectBackend


def kept_back(
    output: Any, report: Any, *, local_roots: tuple[str, ...], from_journal: bool = False
) -> str | None:
    """Why a result's output and report keep it out of the remote, or None. Cheap: no object
    is read (``object_kept_back`` does that)."""
    roots = tuple(r for r in local_roots if r)
    if _names(output, roots) or _names(report, roots):
        return "its output names a local path"
    if secretmask.holds_secret(output) or secretmask.holds_secret(report):
        return "its output holds a secret"
    if from_journal and (_masked(output) or _masked(report)):
        return "its output held a secret when it ran (the journal keeps it masked)"
    return None


def object_kept_back(digests: Iterable[str], objects: ObjectBackend) -> str | None:
    """Why the objects a result names keep it out of the remote (one holds a known secret), or
    None. Reads each object: call it off the event loop."""
    if not secretmask.active():
        return None
    for digest in sorted(set(digests)):
        try:
            data = objects.read_bytes(digest)
        except StoreError:
            continue  # a missing object is the caller's own reason, said where it is checked
        if secretmask.bytes_hold_secret(data):
            return f"object {digest[:12]} holds a secret"
    return None


def _names(value: Any, roots: tuple[str, ...]) -> bool:
    if not roots:
        return False
    if isinstance(value, str):
        return any(root in value for root in roots)
    if isinstance(value, dict):
        return any(_names(v, roots) for v in value.values())
    if isinstance(value, list):
        return any(_names(v, roots) for v in value)
    return False


def _masked(value: Any) -> bool:
    if isinstance(value, str):
        return secretmask.MASK in value
    if isinstance(value, dict):
        return any(_masked(k) or _masked(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_masked(v) for v in value)
    return False
