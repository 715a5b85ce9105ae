"""Reading a remote cache's records and objects with bounds, before anything parses them.

A remote is written by everyone who can push to it, so what it holds is untrusted until its
signature and digest are checked, and both checks need the bytes. Reading them must therefore
be safe whatever the remote holds at a name: a record that was a FIFO hung every clone's apply
with no message (the read waited for a writer), and one that was a symlink to /dev/zero grew an
apply to 10 GB before the signature check could refuse it. An S3 remote can hold a multi-GB
record as easily.

So every read here is bounded, and a name that is not a plain file of bounded size is
*refused* (a ``Refused`` value, said in one line by the caller) without reading past the cap:

- a file remote (``file://``): opened with O_NOFOLLOW (a symlink is refused, never followed)
  and O_NONBLOCK (opening a FIFO never waits), then ``fstat``: only a regular file of at most
  the cap is read, and the read stops at the cap whatever the file does meanwhile;
- S3: the GET's ContentLength is checked before its body is read, and the body is read only up
  to the cap (a server that sends more than it announced is cut off and refused);
- any other fsspec filesystem: its size first, then a ranged read up to the cap.

Only a failure to reach the remote at all raises; one bad name is one refused value.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from typing import Any

from ..errors import StoreError

# A record is a step's output document (at most 64 KiB each of stdout and stderr inline, a
# model's reply, a report): a few KiB, rarely more than a few hundred. 16 MiB is far above any
# honest record and far below what could hurt.
MAX_RECORD_BYTES = 16 << 20
# Objects are held in memory to be verified (their digest) before they are stored: an object
# larger than this is not taken from a remote (the step runs here instead).
MAX_OBJECT_BYTES = 2 << 30
_READ_CHUNK = 1 << 20


class Refused(StoreError):
    """A name in the remote that is not read: not a regular file, or larger than its cap.
    Its message is the reason, without the name (the caller says which record or object)."""


def read_bounded(fs: Any, caps: Mapping[str, int], *, url: str) -> dict[str, bytes | Refused]:
    """The bytes at each path of ``caps`` (path -> the most bytes it may hold), in one batch.

    A path the remote does not hold is left out of the result; one that is not a regular file,
    or holds more than its cap, is a ``Refused`` value, read no further than the cap. Raises
    StoreError when the remote cannot be reached."""
    if not caps:
        return {}
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if {"file", "local"} & set(protocols):
        found = {path: _read_local(path, cap) for path, cap in caps.items()}
        return {path: data for path, data in found.items() if data is not None}
    if {"s3", "s3a"} & set(protocols):
        return _read_s3(fs, caps, url)
    return _read_sized(fs, caps, url)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a file"


def _too_large(size: int, cap: int) -> Refused:
    return Refused(f"it holds {size:,} bytes, more than the {cap:,} allowed")


def _read_local(path: str, cap: int) -> bytes | Refused | None:
    """A file remote's file: None when absent."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a symlink
            return Refused("it is a symbolic link, not a regular file (never followed)")
        return Refused(f"it cannot be read: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Refused(f"it is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            return _too_large(st.st_size, cap)
        chunks: list[bytes] = []
        total = 0
        while total <= cap:  # the file may grow while it is read: the cap still holds
            chunk = os.read(fd, min(_READ_CHUNK, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            return Refused(f"it grew past the {cap:,} bytes allowed while it was read")
        return b"".join(chunks)
    except OSError as exc:
        return Refused(f"it cannot be read: {exc.strerror or exc}")
    finally:
        os.close(fd)


def _read_s3(fs: Any, caps: Mapping[str, int], url: str) -> dict[str, bytes | Refused]:
    """One GET per path, sent concurrently on s3fs's loop; each body read only up to its cap."""
    import asyncio

    from fsspec.asyn import sync

    async def one(path: str, cap: int) -> bytes | Refused | None:
        bucket, key, _version = fs.split_path(path)
        try:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        body = resp["Body"]
        try:
            length = resp.get("ContentLength")
            if isinstance(length, int) and length > cap:
                return _too_large(length, cap)  # before a byte of the body is read
            chunks: list[bytes] = []
            total = 0
            while total <= cap:
                chunk = await body.read(min(_READ_CHUNK, cap + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > cap:
                return Refused(f"it sent more than the {cap:,} bytes allowed (cut off there)")
            return b"".join(chunks)
        finally:
            body.close()

    async def run() -> list[Any]:
        gate = asyncio.Semaphore(32)

        async def gated(path: str, cap: int) -> Any:
            async with gate:
                return await one(path, cap)

        return list(
            await asyncio.gather(*(gated(p, c) for p, c in caps.items()), return_exceptions=True)
        )

    out: dict[str, bytes | Refused] = {}
    for path, result in zip(caps, sync(fs.loop, run), strict=True):
        if isinstance(result, BaseException) and not isinstance(result, Refused):
            # Not "absent" and not bytes: the remote itself is failing (unreachable, refused
            # credentials, a library error). The caller goes on without it.
            raise StoreError(f"cannot reach the remote cache {url}: {result}")
        if result is not None:
            out[path] = result
    return out


def _read_sized(fs: Any, caps: Mapping[str, int], url: str) -> dict[str, bytes | Refused]:
    """Any other filesystem (memory://, gs://): its size, then a read bounded by the cap."""
    out: dict[str, bytes | Refused] = {}
    for path, cap in caps.items():
        try:
            info = fs.info(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot reach the remote cache {url}: {exc}") from exc
        if info.get("type") not in (None, "file"):
            out[path] = Refused(f"it is a {info.get('type')}, not a file")
            continue
        size = info.get("size")
        if isinstance(size, int) and size > cap:
            out[path] = _too_large(size, cap)
            continue
        try:
            data = fs.cat_file(path, start=0, end=cap + 1)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot reach the remote cache {url}: {exc}") from exc
        out[path] = (
            Refused(f"it holds more than the {cap:,} bytes allowed") if len(data) > cap else data
        )
    return out
