"""Opening a file beneath a root at the moment it is opened, not as the disk was at compile time.

A path is checked against its root when a pipeline compiles (``paths.inside``), but the file is
opened later: by then an earlier step may have replaced a directory on its path with a symlink
pointing out, and a check made then (or remembered from then) would let the body read, hash and
journal a file outside the project. So the check is made on what was actually opened: the file
is opened first, then the real path of the open descriptor (the kernel's answer, not a second
walk of the path that could be swapped again in between) must lie inside the root's real path.
Symlinks that stay inside the root keep working, as they do at compile time.

Writing somewhere a person owns (``runner init``) is stricter: no symlink is followed at all
below the root, each component opened with O_NOFOLLOW beneath its parent's descriptor, so a
symlinked ``.gitignore`` or a dangling ``pipeline.yaml`` link is refused, never written through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path

from .regularfile import NotRegularFile, describe_mode

_F_GETPATH = 50  # macOS fcntl: the path of an open descriptor (fcntl.F_GETPATH, absent on Linux)


class OutsideRoot(OSError):
    """The file opened lies outside its root (a symlink on its path points out)."""


class SymlinkRefused(OSError):
    """A component of a path to be written is a symlink; runner does not write through one."""


def read_beneath(root: Path | str, rel: str) -> bytes:
    """The bytes of the regular file ``rel`` beneath ``root`` as the disk is now.

    Raises OutsideRoot when what was opened lies outside the root, NotRegularFile for a FIFO,
    directory or device (never blocking on a FIFO), FileNotFoundError and the like as open does:
    every one an OSError with a strerror worded for the user."""
    fd = open_beneath(root, rel)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def open_beneath(root: Path | str, rel: str, *, real_root: str | None = None) -> int:
    """A descriptor open for reading on the regular file ``rel`` beneath ``root``; raises as
    ``read_beneath``. ``real_root``: ``os.path.realpath(root)`` when the caller has it (one walk
    for many files). The caller closes it."""
    base = os.path.realpath(root) if real_root is None else real_root
    fd = os.open(os.path.join(base, rel), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        real = fd_path(fd)
        if real is None:  # no way to ask the kernel: the same answer from a walk, then compared
            real = os.path.realpath(os.path.join(base, rel))
            st, now = os.fstat(fd), os.stat(real)
            if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
                raise OutsideRoot(errno.EXDEV, "changed while it was opened", rel)
        if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
            raise OutsideRoot(
                errno.EXDEV, f"resolves to {real}, outside the pipeline root {base}", rel
            )
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"{describe_mode(mode)}, not a regular file", rel)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def fd_path(fd: int) -> str | None:
    """The real path of the file open as ``fd``, as the kernel holds it; None where the
    platform cannot say."""
    if sys.platform == "darwin":
        import fcntl

        raw = fcntl.fcntl(fd, _F_GETPATH, b"\0" * 1024)
        return os.fsdecode(raw.split(b"\0", 1)[0])
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def open_nofollow(
    root: Path, rel: str, flags: int, *, make_parents: bool = False, mode: int = 0o666
) -> int:
    """``rel`` beneath ``root`` opened with ``flags``, no symlink followed below ``root`` (each
    directory opened with O_NOFOLLOW beneath its parent, the leaf too). ``make_parents``
    creates missing directories on the way. Raises SymlinkRefused naming the component that is
    a symlink, or the OSError open raises. The caller closes the descriptor."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a plain relative path", rel)
    here = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for n, part in enumerate(parts[:-1]):
            shown = "/".join(parts[: n + 1])
            try:
                below = _open_dir(part, here, shown)
            except FileNotFoundError:
                if not make_parents:
                    raise
                # made meanwhile by someone else: opened below all the same, refused if a link
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=here)
                below = _open_dir(part, here, shown)
            os.close(here)
            here = below
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=here)
        except OSError as exc:
            _refuse_if_link(parts[-1], here, rel, exc)
            raise
    finally:
        os.close(here)


def _open_dir(name: str, parent: int, shown: str) -> int:
    try:
        return os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError as exc:
        _refuse_if_link(name, parent, shown, exc)
        raise


def _refuse_if_link(name: str, parent: int, shown: str, exc: OSError) -> None:
    """Turns an open refused because ``name`` is a symlink (ELOOP, or ENOTDIR for a directory
    opened with O_NOFOLLOW on some systems) into SymlinkRefused; leaves any other error be."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return
    if is_link:
        raise SymlinkRefused(
            errno.ELOOP, "a symlink; runner does not write through one", shown
        ) from None
