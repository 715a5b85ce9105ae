"""`runner cache status|push`: what a state shares with its remote cache, and pushing it.

(`runner cache pull FILE` is an apply that takes what the remote has and runs nothing else:
ApplyOptions.remote_only.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import StoreError, UsageError
from ...source import secretmask
from ...state.journal import Journal
from ...state.objects import ObjectStore
from ...state.records import loads
from ...state.remote import (
    CacheSettings,
    RemoteCache,
    RemoteRecord,
    cache_settings,
    signing_key,
)
from ...state.remote import read_cache_section as read_cache_section
from .shareable import kept_back, object_kept_back

PUSH_BATCH = 200  # results per batch: objects then records, sent concurrently


@dataclass
class CacheReport:
    remote: str
    writable: bool
    push: str
    local_results: int = 0
    in_remote: int = 0
    pushed: int = 0
    objects_written: int = 0
    skipped: list[str] = field(default_factory=list)  # keys not pushed, with why

    def to_json(self) -> dict[str, Any]:
        return {
            "remote": self.remote,
            "writable": self.writable,
            "push": self.push,
            "local_results": self.local_results,
            "in_remote": self.in_remote,
            "pushed": self.pushed,
            "objects_written": self.objects_written,
            "skipped": self.skipped,
        }


def settings_for(start: Path, url: str | None) -> CacheSettings:
    """[cache] of the project at ``start``, with ``url`` (--remote) taking the remote's place."""
    section, where = read_cache_section(start)
    settings = cache_settings(section, where)
    remote = url or settings.remote
    if not remote:
        raise UsageError(
            "no remote cache is configured",
            hint='add [cache] remote = "s3://bucket/prefix" to runner.toml, or pass --remote URL',
        )
    return CacheSettings(
        remote=remote,
        writable=settings.writable,
        push=settings.push,
        sign_key_env=settings.sign_key_env,
    )


def _shareable_results(journal: Journal) -> dict[str, dict[str, Any]]:
    """The newest completed result of every key whose step type may be shared."""
    from ...steps.registry import default_registry

    registry = default_registry()
    verdict: dict[str, bool] = {}
    rows = journal.query(
        "SELECT key, output, artifacts, files, report, key_parts FROM executions "
        "WHERE status='completed' AND key IS NOT NULL ORDER BY id"
    )
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        parts = loads(row["key_parts"]) or {}
        type_tag = str(parts.get("type") or "")
        name = type_tag.partition("@")[0]
        if name not in verdict:
            step_type = registry.get(name) if name else None
            verdict[name] = bool(step_type is not None and step_type.shareable)
        if verdict[name]:
            out[row["key"]] = {**row, "type": type_tag}
    return out


def status(journal: Journal, settings: CacheSettings) -> CacheReport:
    assert settings.remote is not None
    cache = RemoteCache(settings.remote, writable=settings.writable)
    report = CacheReport(settings.remote, settings.writable, settings.push.value)
    local = _shareable_results(journal)
    report.local_results = len(local)
    present = cache.keys()
    report.in_remote = len(present & set(local))
    return report


def push(
    journal: Journal, objects: ObjectStore, settings: CacheSettings, root: Path
) -> CacheReport:
    """Push every shareable local result the remote lacks. Raises StoreError (read-only,
    unreachable)."""
    assert settings.remote is not None
    sign_key = signing_key(settings, os.environ)  # pushed records are signed when teams sign
    cache = RemoteCache(settings.remote, writable=settings.writable, sign_key=sign_key)
    if not cache.writable:
        raise StoreError(
            f"the remote cache {settings.remote} is read-only",
            hint="set writable = true under [cache] in runner.toml to push to it",
        )
    report = CacheReport(settings.remote, settings.writable, settings.push.value)
    local = _shareable_results(journal)
    report.local_results = len(local)
    present = cache.keys()
    # The apply's rule (shareable.py), with the secrets the apply knew: runner.toml's *_env
    # variables and every credential-looking one set here.
    secretmask.learn_project(root)
    roots = (str(root.resolve()), str(objects.root.parent.resolve()), str(Path.home()))
    pending: list[RemoteRecord] = []
    for key, row in local.items():
        if key in present:
            report.in_remote += 1
            continue
        output, result_report = loads(row["output"]), loads(row["report"])
        why = kept_back(output, result_report, local_roots=roots, from_journal=True)
        if why is not None:
            report.skipped.append(f"{key[:12]}: {why}")
            continue
        digests = loads(row["artifacts"]) or []
        missing = [d for d in digests if not objects.has(d)]
        if missing:
            report.skipped.append(f"{key[:12]}: object {missing[0][:12]} is not in the store")
            continue
        why = object_kept_back(digests, objects)
        if why is not None:
            report.skipped.append(f"{key[:12]}: {why}")
            continue
        profile = output.get("provider_profile") if isinstance(output, dict) else None
        pending.append(
            RemoteRecord(
                key=key,
                step_type=row["type"],
                output=output,
                artifacts={d: objects.size(d) for d in digests},
                files=loads(row["files"]) or {},
                report=result_report,
                provider_profile=profile if isinstance(profile, str) else None,
                runner_version=__version__,
            )
        )
    for start in range(0, len(pending), PUSH_BATCH):
        chunk = pending[start : start + PUSH_BATCH]
        report.objects_written += cache.push(chunk, objects)
        report.pushed += len(chunk)
        report.in_remote += len(chunk)
    _push_reads(cache, local)
    return report


def _push_reads(cache: RemoteCache, local: dict[str, dict[str, Any]]) -> None:
    """The files each base key's latest local result read, for steps whose bodies record their
    reads (recorded.py), where the remote says otherwise: a clone finds their keys by them."""
    reads: dict[str, tuple[str, ...]] = {}
    for row in local.values():  # oldest first: the latest result of a base wins
        parts = loads(row["key_parts"]) or {}
        base, names = parts.get("base"), parts.get("recorded")
        if isinstance(base, str) and isinstance(names, list) and names:
            reads[base] = tuple(str(n) for n in names)
    if not reads:
        return
    there = cache.reads(reads)
    cache.push_reads({b: n for b, n in reads.items() if there.get(b) != n})
