"""The object store's protocol, and an implementation over any fsspec URL.

Every object store holds bytes named by their sha256 hex digest and honours one contract
(tests/test_store_contract.py runs it over each implementation):

- ``put_bytes`` / ``put_file`` are atomic: a reader sees the whole object or none of it. A local
  directory writes a temporary file and renames it; an object store (S3, GCS) makes one PUT of
  bytes whose digest was computed before sending (S3 is also given the SHA-256 so the server
  refuses bytes damaged in transit).
- ``read_bytes`` verifies the digest: a damaged object raises StoreError, it is never served.
- ``has``, ``size``, ``verify``, ``delete``, ``iter_digests`` mean the same everywhere.

The local ``ObjectStore`` (objects.py) is the default; ``FsspecObjectStore`` takes a URL
(``file://``, ``memory://``, ``s3://`` through s3fs, ``gs://`` through gcsfs where installed).
fsspec is imported only when a URL store is opened: a local apply never pays for it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import StoreError

_DIGEST = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@runtime_checkable
class ObjectBackend(Protocol):
    """What every object store offers (the local directory and fsspec URLs alike)."""

    def has(self, digest: str) -> bool: ...

    def size(self, digest: str) -> int: ...

    def put_bytes(
        self, data: bytes, *, durable: bool = False, recoverable: bool = False
    ) -> str: ...

    def put_file(self, source: Path) -> str: ...

    def read_bytes(self, digest: str) -> bytes: ...

    def verify(self, digest: str) -> bool: ...

    def delete(self, digest: str) -> None: ...

    def iter_digests(self) -> list[str]: ...


def check_digest(digest: str) -> str:
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise StoreError(f"not an object digest: {digest!r}")
    return digest


def split_url(url: str) -> tuple[str, str]:
    """``(protocol, path)`` of an fsspec URL; a plain path is ``file``."""
    if "://" not in url:
        return "file", str(Path(url).resolve())
    protocol, _, rest = url.partition("://")
    return protocol.lower(), rest


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` and the path inside it. Raises StoreError.

    Credentials are fsspec's own business (the usual AWS variables, ~/.aws, fsspec config);
    nothing here reads or stores them. ``RUNNER_S3_ENDPOINT`` (or AWS_ENDPOINT_URL, which
    botocore also reads) points s3:// at an S3-compatible server.
    """
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec comes with the [remote] extra
        raise StoreError(
            f"cannot open {url}: fsspec is not installed",
            hint="pip install 'runner-pipelines[remote]'",
        ) from None
    protocol, path = split_url(url)
    options: dict[str, Any] = {}
    if protocol in ("s3", "s3a"):
        import os

        endpoint = os.environ.get("RUNNER_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
        # A dead endpoint should cost seconds, not botocore's default minute of retries: the
        # apply goes on locally after one warning. Transient S3 errors still get a retry.
        options["config_kwargs"] = {
            "connect_timeout": 5,
            "read_timeout": 60,
            "retries": {"max_attempts": 2, "mode": "standard"},
        }
        options["skip_instance_cache"] = True
    try:
        fs = fsspec.filesystem(protocol, **options)
    except (ImportError, ValueError) as exc:
        raise StoreError(
            f"cannot open {url}: {exc}",
            hint="s3:// needs s3fs (pip install 'runner-pipelines[remote]'), gs:// needs gcsfs",
        ) from None
    return fs, path.rstrip("/")


class FsspecObjectStore:
    """Objects at ``<url>/<aa>/<bbbb...>`` on any fsspec filesystem (same layout as local)."""

    def __init__(self, url: str, *, fs: Any = None, path: str | None = None) -> None:
        self.url = url
        if fs is None or path is None:
            fs, path = filesystem(url)
        self.fs = fs
        self.base = path
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        # A local filesystem writes in place: atomicity needs a temporary name and a rename.
        # Object stores (s3, gcs, memory) make an object visible only once it is whole.
        self._rename = bool({"file", "local"} & set(protocols))
        self._s3 = bool({"s3", "s3a"} & set(protocols))

    def __repr__(self) -> str:
        return f"FsspecObjectStore({self.url!r})"

    def _file(self, digest: str) -> str:
        check_digest(digest)
        return f"{self.base}/{digest[:2]}/{digest[2:]}"

    def has(self, digest: str) -> bool:
        try:
            return bool(self.fs.isfile(self._file(digest)))
        except OSError as exc:
            raise StoreError(f"cannot reach {self.url}: {exc}") from exc

    def size(self, digest: str) -> int:
        try:
            return int(self.fs.size(self._file(digest)))
        except FileNotFoundError:
            raise StoreError(f"object {digest[:12]} is missing from {self.url}") from None
        except OSError as exc:
            raise StoreError(f"cannot reach {self.url}: {exc}") from exc

    def put_bytes(self, data: bytes, *, durable: bool = False, recoverable: bool = False) -> str:
        # One PUT is atomic and, once answered, durable: neither flag changes anything here.
        digest = hashlib.sha256(data).hexdigest()
        target = self._file(digest)
        try:
            if self.fs.isfile(target):
                return digest
            self._pipe(target, data, digest)
        except OSError as exc:
            raise StoreError(f"cannot write object {digest[:10]} to {self.url}: {exc}") from exc
        return digest

    def put_file(self, source: Path) -> str:
        # Objects here are model outputs (images, replies): held in memory for one verified PUT.
        return self.put_bytes(Path(source).read_bytes())

    def _pipe(self, target: str, data: bytes, digest: str) -> None:
        if self._rename:
            parent = target.rsplit("/", 1)[0]
            self.fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.tmp-{os.urandom(16).hex()}"
            try:
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, target)
            except BaseException:
                if self.fs.exists(tmp):
                    self.fs.rm_file(tmp)
                raise
        elif self._s3:
            # One PUT; the server checks the bytes it received against the digest we computed.
            checksum = base64.b64encode(bytes.fromhex(digest)).decode("ascii")
            self.fs.pipe_file(target, data, ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum)
        else:
            self.fs.pipe_file(target, data)

    def read_bytes(self, digest: str) -> bytes:
        try:
            data: bytes = self.fs.cat_file(self._file(digest))
        except FileNotFoundError:
            raise StoreError(f"object {digest[:12]} is missing from {self.url}") from None
        except OSError as exc:
            raise StoreError(f"cannot read object {digest[:12]} from {self.url}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"object {digest[:12]} in {self.url} is damaged (digest mismatch)")
        return data

    def read_many(self, digests: Iterable[str]) -> dict[str, bytes | StoreError]:
        """Several objects in one batched call (s3fs fetches them concurrently), each verified."""
        wanted = {self._file(d): d for d in digests}
        if not wanted:
            return {}
        try:
            got = self.fs.cat(list(wanted), on_error="return")
        except OSError as exc:
            raise StoreError(f"cannot read objects from {self.url}: {exc}") from exc
        out: dict[str, bytes | StoreError] = {}
        for path, digest in wanted.items():
            data = got.get(path) if isinstance(got, dict) else None
            if not isinstance(data, bytes):
                out[digest] = StoreError(f"object {digest[:12]} is missing from {self.url}")
            elif hashlib.sha256(data).hexdigest() != digest:
                out[digest] = StoreError(
                    f"object {digest[:12]} in {self.url} is damaged (digest mismatch)"
                )
            else:
                out[digest] = data
        return out

    def has_many(self, digests: Iterable[str]) -> set[str]:
        """Which of ``digests`` are stored (HEAD requests sent concurrently on async stores)."""
        paths = {self._file(d): d for d in digests}
        if not self.fs.async_impl:
            return {d for p, d in paths.items() if self.fs.isfile(p)}
        results = self._gather([self.fs._exists(p) for p in paths])
        out = set()
        for (_path, digest), found in zip(paths.items(), results, strict=True):
            if isinstance(found, BaseException):
                raise StoreError(f"cannot reach {self.url}: {found}")
            if found:
                out.add(digest)
        return out

    def put_many(self, blobs: Mapping[str, bytes]) -> None:
        """Store several objects named by their digests (checked here), concurrently where the
        filesystem is asynchronous; each write is as atomic as ``put_bytes``."""
        for digest, data in blobs.items():
            if hashlib.sha256(data).hexdigest() != digest:
                raise StoreError(f"refusing to store object {digest[:12]}: bytes do not match")
        if not self.fs.async_impl or self._rename:
            for digest, data in blobs.items():
                self._pipe(self._file(digest), data, digest)
            return
        coros = []
        for digest, data in blobs.items():
            kwargs = {}
            if self._s3:
                checksum = base64.b64encode(bytes.fromhex(digest)).decode("ascii")
                kwargs = {"ChecksumAlgorithm": "SHA256", "ChecksumSHA256": checksum}
            coros.append(self.fs._pipe_file(self._file(digest), data, **kwargs))
        for result in self._gather(coros):
            if isinstance(result, BaseException):
                raise StoreError(f"cannot write objects to {self.url}: {result}")

    def _gather(self, coros: list[Any]) -> list[Any]:
        """Run an async filesystem's coroutines on its own loop, at most 32 at a time."""
        from fsspec.asyn import sync

        async def run() -> list[Any]:
            import asyncio

            gate = asyncio.Semaphore(32)

            async def one(c: Any) -> Any:
                async with gate:
                    return await c

            return list(await asyncio.gather(*(one(c) for c in coros), return_exceptions=True))

        return list(sync(self.fs.loop, run))

    def verify(self, digest: str) -> bool:
        try:
            self.read_bytes(digest)
        except StoreError:
            return False
        return True

    def delete(self, digest: str) -> None:
        target = self._file(digest)
        try:
            if self.fs.isfile(target):
                self.fs.rm_file(target)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot delete object {digest[:12]} from {self.url}: {exc}") from exc

    def iter_digests(self) -> list[str]:
        return sorted(self._walk())

    def _walk(self) -> Iterator[str]:
        try:
            paths = self.fs.find(self.base)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot list {self.url}: {exc}") from exc
        for path in paths:
            head, _, name = str(path).rpartition("/")
            digest = head[-2:] + name
            if len(name) == 62 and _DIGEST.fullmatch(digest):
                yield digest


def open_objects(location: str | Path) -> ObjectBackend:
    """The object store at a local directory or an fsspec URL."""
    text = str(location)
    if "://" not in text:
        from .objects import ObjectStore

        return ObjectStore(Path(text))
    return FsspecObjectStore(text)
