"""Opening a file the user named (a pipeline, a data file, a template, runner.toml) for reading.

Only a regular file is read: a FIFO would block the open until some writer appears (for ever,
when none does), and a directory, socket or device is not a document either. The refusal is an
OSError whose strerror says what the path is, so every reader's ``except OSError`` already words
it for the user ("cannot read p.yaml: a FIFO, not a regular file").
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file."""


def describe_mode(mode: int) -> str:
    """What a file of ``mode`` is, for a message ("a FIFO (named pipe)", "a directory")."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file (following symlinks), else
    None: so a check that finds no file to read says "a FIFO", not "file not found"."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else describe_mode(mode)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary; raises NotRegularFile (an OSError) for anything
    but a regular file (a symlink to one is fine), FileNotFoundError and the like as open does.
    Never blocks on a FIFO: it is opened without waiting for a writer, then refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(
                errno.EINVAL, f"{describe_mode(mode)}, not a regular file", os.fspath(path)
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``; raises as ``open_regular``."""
    with open_regular(path) as f:
        return f.read()


def read_regular_text(path: Path, encoding: str = "utf-8") -> str:
    return read_regular(path).decode(encoding)
