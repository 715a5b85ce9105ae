"""A remote cache of step results, shared by a team through any fsspec URL.

Layout under the remote's URL (nothing in it names a local path):

    objects/<aa>/<bbbb...>        content-addressed bytes (the same layout as .runner/objects)
    records/<kk>/<key>.json       one step result per key: its output document, the digests it
                                  names, the provider profile, when and by which runner version
    reads/<bb>/<base>.json        for a step whose body records its reads (a template's computed
                                  include), the files its latest result with that base key
                                  read: a clone hashes them as they are here to find the key

A record is written only after every object it names is in the remote, so a visible record is
whole. Objects are idempotent (their name is their digest); two machines pushing the same key
write records for the same key, each whole: last writer wins. A record is untrusted input:
it is read with bounds before anything parses it (remoteread.py: a regular file of at most
MAX_RECORD_BYTES, an object of exactly the size its record gives), its shape is checked, its
objects verified, its files must stay inside the project. A record or object refused is said,
and its step runs here; the rest of the remote is still used.

Configured in runner.toml (credentials never: they come from the environment, as fsspec and
botocore read them):

    [cache]
    remote = "s3://team-bucket/runner"   # any fsspec URL; or `runner apply --remote URL`
    writable = true                      # default false: a remote is read-only unless said
    push = "apply"                       # "apply" (after each step), "manual" (runner cache
                                         # push), or "never"
    sign_key_env = "RUNNER_CACHE_KEY"    # optional: records are signed (HMAC-SHA256) with the
                                         # team's key read from this variable, and unsigned or
                                         # mis-signed ones are ignored
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import Location, StoreError
from ..source.tomlfile import find_runner_toml
from .backends import FsspecObjectStore, ObjectBackend, check_digest, filesystem
from .canonical import canonical_json, loads_strict
from .remoteread import MAX_OBJECT_BYTES, MAX_RECORD_BYTES, Refused, read_bounded

RECORD_FORMAT = 1
READS_FORMAT = 1


class PushPolicy(enum.Enum):
    APPLY = "apply"
    MANUAL = "manual"
    NEVER = "never"


@dataclass(frozen=True)
class CacheSettings:
    """The ``[cache]`` section of runner.toml (an empty one: no remote)."""

    remote: str | None = None
    writable: bool = False
    push: PushPolicy = PushPolicy.APPLY
    sign_key_env: str | None = None  # the variable holding the team's record-signing key

    @property
    def pushes_on_apply(self) -> bool:
        return self.writable and self.push is PushPolicy.APPLY


def cache_settings(section: Mapping[str, Any] | None, where: Location | None) -> CacheSettings:
    """Parse ``[cache]``. Raises StoreError (a configuration mistake, exit 2) naming the key."""
    if not section:
        return CacheSettings()
    unknown = sorted(set(section) - {"remote", "writable", "push", "sign_key_env"})
    if unknown:
        raise ConfigError(
            f"[cache] has unknown key(s) {', '.join(unknown)}",
            where=where,
            hint="[cache] accepts remote, writable, push, sign_key_env; credentials and keys "
            "come from the environment",
        )
    sign_env = section.get("sign_key_env")
    if sign_env is not None and (not isinstance(sign_env, str) or not sign_env.strip()):
        raise ConfigError(
            "[cache] sign_key_env must name an environment variable (never the key itself)",
            where=where,
        )
    remote = section.get("remote")
    if remote is not None and (not isinstance(remote, str) or not remote.strip()):
        raise ConfigError("[cache] remote must be a URL (e.g. s3://bucket/prefix)", where=where)
    writable = section.get("writable", False)
    if not isinstance(writable, bool):
        raise ConfigError("[cache] writable must be true or false", where=where)
    push = section.get("push", PushPolicy.APPLY.value)
    try:
        policy = PushPolicy(push)
    except ValueError:
        choices = ", ".join(p.value for p in PushPolicy)
        raise ConfigError(f"[cache] push must be one of {choices}", where=where) from None
    return CacheSettings(remote=remote, writable=writable, push=policy, sign_key_env=sign_env)


def read_cache_section(start: Path) -> tuple[dict[str, Any], Location | None]:
    """The ``[cache]`` table of the nearest runner.toml above ``start`` (parsed only when the
    file mentions it: every apply calls this, and most projects have no remote)."""
    candidate = find_runner_toml(start)
    if candidate is None:
        return {}, None
    text = candidate.read_text(encoding="utf-8", errors="replace")
    if "cache" not in text:
        return {}, None
    import tomllib

    where = Location(str(candidate))
    try:
        section = tomllib.loads(text).get("cache", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", where=where) from None
    if not isinstance(section, dict):
        raise ConfigError("[cache] must be a table", where=where)
    return section, where


class ConfigError(StoreError):
    exit_code = 2


def signing_key(settings: CacheSettings, environ: Mapping[str, str]) -> bytes | None:
    """The team's record-signing key (None when [cache] names none). Raises StoreError when
    the variable it names is not set: records could then be neither checked nor signed."""
    if settings.sign_key_env is None:
        return None
    value = environ.get(settings.sign_key_env)
    if not value:
        raise StoreError(
            f"[cache] sign_key_env names {settings.sign_key_env}, which is not set: the "
            "remote's records can be neither checked nor signed",
            hint=f"set {settings.sign_key_env} to the team's cache key",
        )
    return value.encode("utf-8")


@dataclass(frozen=True)
class RemoteRecord:
    """One shared step result. ``artifacts`` maps every digest it names to its size."""

    key: str
    step_type: str
    output: Any
    artifacts: dict[str, int]
    files: dict[str, str]
    report: Any = None
    provider_profile: str | None = None
    created_at: float = field(default_factory=time.time)
    runner_version: str = ""

    def to_bytes(self, sign_key: bytes | None = None) -> bytes:
        """The record's canonical JSON; with ``sign_key``, with its signature in it."""
        doc: dict[str, Any] = {
            "format": RECORD_FORMAT,
            "key": self.key,
            "step_type": self.step_type,
            "output": self.output,
            "artifacts": self.artifacts,
            "files": self.files,
            "report": self.report,
            "provider_profile": self.provider_profile,
            "created_at": round(self.created_at, 3),
            "runner_version": self.runner_version,
        }
        if sign_key is not None:
            doc["signature"] = _signature(doc, sign_key)
        return canonical_json(doc).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, key: str, sign_key: bytes | None = None) -> RemoteRecord:
        """Parse and check a record read from the remote; with ``sign_key``, its signature
        too. Raises StoreError on any doubt."""
        try:
            doc = loads_strict(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise StoreError(f"record {key[:12]} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT:
            raise StoreError(f"record {key[:12]} has an unknown format")
        signature = doc.pop("signature", None)
        if sign_key is not None:
            if not isinstance(signature, str):
                raise StoreError(f"record {key[:12]} is not signed")
            if not hmac.compare_digest(signature, _signature(doc, sign_key)):
                raise StoreError(f"record {key[:12]} is not signed with the team's key")
        if doc.get("key") != key:
            raise StoreError(f"record {key[:12]} names another key")
        artifacts = doc.get("artifacts")
        files = doc.get("files")
        if not isinstance(artifacts, dict) or not isinstance(files, dict):
            raise StoreError(f"record {key[:12]} lacks artifacts or files")
        for digest, size in artifacts.items():
            check_digest(digest)
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise StoreError(f"record {key[:12]} gives object {digest[:12]} a bad size")
            if size > MAX_OBJECT_BYTES:
                raise StoreError(
                    f"record {key[:12]} names object {digest[:12]} of {size:,} bytes, more "
                    f"than the {MAX_OBJECT_BYTES:,} taken from a remote"
                )
        for rel, digest in files.items():
            check_digest(digest)
            if not _inside_project(rel):
                raise StoreError(f"record {key[:12]} names a file outside the project: {rel!r}")
            if digest not in artifacts:
                raise StoreError(f"record {key[:12]} names file {rel} without its object")
        step_type = doc.get("step_type")
        if not isinstance(step_type, str):
            raise StoreError(f"record {key[:12]} has no step type")
        profile = doc.get("provider_profile")
        created = doc.get("created_at")
        return cls(
            key=key,
            step_type=step_type,
            output=doc.get("output"),
            artifacts={str(d): int(s) for d, s in artifacts.items()},
            files={str(r): str(d) for r, d in files.items()},
            report=doc.get("report"),
            provider_profile=profile if isinstance(profile, str) else None,
            created_at=float(created) if isinstance(created, (int, float)) else 0.0,
            runner_version=str(doc.get("runner_version") or ""),
        )


def _signature(doc: Mapping[str, Any], sign_key: bytes) -> str:
    """HMAC-SHA256 of the record's canonical JSON (without its signature): the key the record
    is filed under is inside it, so a signed record cannot be moved to another key."""
    body = canonical_json({k: v for k, v in doc.items() if k != "signature"}).encode("utf-8")
    return "hmac-sha256:" + hmac.new(sign_key, body, hashlib.sha256).hexdigest()


def _parse_reads(data: bytes, base: str, sign_key: bytes | None) -> tuple[str, ...]:
    """The names of a ``reads/`` entry, checked as a record is (format, signature, the base it
    is filed under, names inside the project). Raises StoreError on any doubt."""
    try:
        doc = loads_strict(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"reads of {base[:12]} are not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != READS_FORMAT:
        raise StoreError(f"reads of {base[:12]} have an unknown format")
    signature = doc.pop("signature", None)
    if sign_key is not None and not (
        isinstance(signature, str) and hmac.compare_digest(signature, _signature(doc, sign_key))
    ):
        raise StoreError(f"reads of {base[:12]} are not signed with the team's key")
    names = doc.get("recorded")
    if doc.get("base") != base or not isinstance(names, list):
        raise StoreError(f"reads of {base[:12]} name another base key or no files")
    if not all(_inside_project(n) for n in names):
        raise StoreError(f"reads of {base[:12]} name a file outside the project")
    return tuple(names)


def _inside_project(rel: Any) -> bool:
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        return False
    path = PurePosixPath(rel)
    return not path.is_absolute() and ".." not in path.parts


class RemoteCache:
    """Records and objects at one fsspec URL. Every method is blocking (call it in a thread)."""

    def __init__(self, url: str, *, writable: bool = False, sign_key: bytes | None = None) -> None:
        self.url = url.rstrip("/")
        self.writable = writable
        self.sign_key = sign_key  # records written are signed, records read must be
        fs, base = filesystem(self.url)
        self.fs = fs
        self.base = base
        self.objects = FsspecObjectStore(f"{self.url}/objects", fs=fs, path=f"{base}/objects")
        self.requests = 0  # metadata and object requests made (bench/bench_remote.py prints it)

    def _record_path(self, key: str) -> str:
        check_digest(key)
        return f"{self.base}/records/{key[:2]}/{key}.json"

    def records(self, keys: Iterable[str]) -> dict[str, RemoteRecord | StoreError]:
        """The records of ``keys`` present in the remote, in one batched read.

        A key without a record is absent from the result; an unreadable or malformed record is
        a StoreError value (reported by the caller, never used). Raises StoreError when the
        remote cannot be reached at all.
        """
        paths = {self._record_path(k): k for k in keys}
        if not paths:
            return {}
        self.requests += 1
        got = read_bounded(self.fs, dict.fromkeys(paths, MAX_RECORD_BYTES), url=self.url)
        out: dict[str, RemoteRecord | StoreError] = {}
        for path, key in paths.items():
            data = got.get(path)
            if data is None:
                continue
            if isinstance(data, Refused):
                out[key] = StoreError(f"record {key[:12]} refused: {data.message}")
                continue
            try:
                out[key] = RemoteRecord.from_bytes(data, key, self.sign_key)
            except StoreError as exc:
                out[key] = exc
        return out

    def fetch(self, records: Iterable[RemoteRecord], local: ObjectBackend) -> dict[str, StoreError]:
        """Copy the objects of ``records`` missing locally into ``local``, in one batched read,
        each verified. Returns the records (by key) that cannot be used, with why; raises
        StoreError when the remote cannot be reached."""
        records = list(records)
        # Each object is read up to the size its record gives (the largest, when records
        # disagree: the others then fail the size check below), never further.
        wanted: dict[str, int] = {}
        for r in records:
            for digest, size in r.artifacts.items():
                if digest not in wanted and local.has(digest):
                    continue
                wanted[digest] = max(size, wanted.get(digest, 0))
        got: dict[str, bytes | StoreError] = {}
        if wanted:
            self.requests += 1
            got = self._read_objects(wanted)
        for data in got.values():
            if isinstance(data, bytes):
                local.put_bytes(data)
        bad: dict[str, StoreError] = {}
        for r in records:
            for digest, size in sorted(r.artifacts.items()):
                problem = got.get(digest)
                if isinstance(problem, StoreError):
                    bad[r.key] = problem
                    break
                if isinstance(problem, bytes) and len(problem) != size:
                    bad[r.key] = StoreError(
                        f"object {digest[:12]} holds {len(problem):,} bytes, its record says "
                        f"{size:,}"
                    )
                    break
        return bad

    def _read_objects(self, wanted: Mapping[str, int]) -> dict[str, bytes | StoreError]:
        """Objects by digest, each read bounded by its size (remoteread.py) and verified."""
        paths = {self.objects._file(d): d for d in wanted}
        got = read_bounded(self.fs, {p: wanted[d] for p, d in paths.items()}, url=self.url)
        out: dict[str, bytes | StoreError] = {}
        for path, digest in paths.items():
            data = got.get(path)
            if data is None:
                out[digest] = StoreError(f"object {digest[:12]} is missing from {self.url}")
            elif isinstance(data, Refused):
                out[digest] = StoreError(f"object {digest[:12]} refused: {data.message}")
            elif hashlib.sha256(data).hexdigest() != digest:
                out[digest] = StoreError(
                    f"object {digest[:12]} in {self.url} is damaged (digest mismatch)"
                )
            else:
                out[digest] = data
        return out

    def push(
        self,
        records: Iterable[RemoteRecord],
        local: ObjectBackend,
        *,
        repair: Iterable[str] = (),
    ) -> int:
        """Upload the objects of ``records`` the remote lacks (and ``repair``: ones known to be
        damaged there), then the records: a visible record always has its objects. Returns
        the number of objects written. Raises StoreError (read-only, unreachable)."""
        if not self.writable:
            raise StoreError(
                f"the remote cache {self.url} is read-only",
                hint="set writable = true under [cache] in runner.toml to push to it",
            )
        records = list(records)
        forced = set(repair)
        digests = {d for r in records for d in r.artifacts}
        self.requests += 1
        present = self.objects.has_many(digests - forced)
        upload = {d: local.read_bytes(d) for d in sorted(digests - present)}
        if upload:
            self.requests += 1
            self.objects.put_many(upload)
        self.requests += 1
        try:
            self._write_records(records)
        except OSError as exc:
            raise StoreError(f"cannot write records to {self.url}: {exc}") from exc
        return len(upload)

    def _write_records(self, records: list[RemoteRecord]) -> None:
        self._put({self._record_path(r.key): r.to_bytes(self.sign_key) for r in records})

    def _put(self, docs: Mapping[str, bytes]) -> None:
        """Write each path's bytes: on a local filesystem each file whole or not at all; on
        object stores one PUT each, sent concurrently by async filesystems."""
        if not self.objects._rename:
            self.fs.pipe(dict(docs))
            return
        for path, data in docs.items():
            parent, name = path.rsplit("/", 1)
            self.fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.tmp-{name}-{time.time_ns()}"
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, path)

    def _reads_path(self, base: str) -> str:
        check_digest(base)
        return f"{self.base}/reads/{base[:2]}/{base}.json"

    def reads(self, bases: Iterable[str]) -> dict[str, tuple[str, ...] | StoreError]:
        """For each base key the remote has recorded reads of, the names of the files read
        (engine/run/recorded.py), in one batched read; a malformed, unsigned or mis-signed
        entry is a StoreError value. Only names: the key is made of the files as they are
        where it is looked up. Raises StoreError when the remote cannot be reached."""
        paths = {self._reads_path(b): b for b in bases}
        if not paths:
            return {}
        self.requests += 1
        got = read_bounded(self.fs, dict.fromkeys(paths, MAX_RECORD_BYTES), url=self.url)
        out: dict[str, tuple[str, ...] | StoreError] = {}
        for path, base in paths.items():
            data = got.get(path)
            if data is None:
                continue
            if isinstance(data, Refused):
                out[base] = StoreError(f"reads of {base[:12]} refused: {data.message}")
                continue
            try:
                out[base] = _parse_reads(data, base, self.sign_key)
            except StoreError as exc:
                out[base] = exc
        return out

    def push_reads(self, reads: Mapping[str, tuple[str, ...]]) -> None:
        """Write the recorded reads of each base key (last writer wins, as for records)."""
        docs = {}
        for base, names in reads.items():
            doc: dict[str, Any] = {"format": READS_FORMAT, "base": base, "recorded": list(names)}
            if self.sign_key is not None:
                doc["signature"] = _signature(doc, self.sign_key)
            docs[self._reads_path(base)] = canonical_json(doc).encode("utf-8")
        if not docs:
            return
        self.requests += 1
        try:
            self._put(docs)
        except OSError as exc:
            raise StoreError(f"cannot write recorded reads to {self.url}: {exc}") from exc

    def keys(self) -> set[str]:
        """Every key with a record in the remote (one listing)."""
        self.requests += 1
        try:
            paths = self.fs.find(f"{self.base}/records")
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise StoreError(f"cannot reach the remote cache {self.url}: {exc}") from exc
        out = set()
        for p in paths:
            name = str(p).rsplit("/", 1)[-1]
            if name.endswith(".json") and len(name) == 69:
                out.add(name[:-5])
        return out
