"""Linux Landlock, through its three system calls: what a sandboxed command may read, write and
reach, as rules the kernel enforces on it and everything it starts.

A ruleset *handles* a set of access rights (every one this kernel knows, here) and grants some
of them beneath given files and directories; once a process restricts itself with it, a handled
right is refused everywhere no rule grants it, for good (exec, fork and setuid do not undo it).
Landlock has no "deny" rule: "all of / but the project" is granted as the siblings of each of the
project's ancestors (``outside``). Numbers and layouts from the kernel's
include/uapi/linux/landlock.h (ABI 1-7); used by the sandbox's spawner (runner/expr/_spawner.py)
between fork and exec, and by runner to learn whether the kernel has it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import time
from collections.abc import Iterator

# System call numbers: the same on every architecture that has them (x86-64, arm64, riscv, ...).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: link or rename across directories
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6: no connecting to a socket outside the sandbox
SCOPE_SIGNAL = 1 << 1  # ABI 6: no signal to a process outside it (runner, the spawner)

# The rights each ABI version knows (a ruleset may only handle known ones).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}

# Rights a rule on a file (not a directory) may grant.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = READ_FILE | READ_DIR | EXECUTE
EVERYTHING = (1 << 16) - 1


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


_syscall = None


def _call(number: int, *args: object) -> int:
    global _syscall
    if _syscall is None:
        _syscall = _libc().syscall
        _syscall.restype = ctypes.c_long
    result = int(_syscall(number, *args))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def abi() -> int:
    """The kernel's Landlock ABI version: 0 when it has none (or it is disabled)."""
    try:
        return _call(
            _CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except (OSError, AttributeError):
        return 0


def fs_rights(version: int) -> int:
    """Every filesystem right ABI ``version`` handles."""
    return _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= version)]


class Ruleset:
    """One ruleset being built: ``allow`` grants, ``enforce`` restricts the calling process.

    Opened per command in the spawner; its descriptor is closed by ``close`` (or exec: it is
    close-on-exec)."""

    def __init__(self, version: int, *, network: bool) -> None:
        self.version = version
        self.fs = fs_rights(version)
        net = 0 if network or version < 4 else NET_BIND_TCP | NET_CONNECT_TCP
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
        if version >= 6:
            attr = struct.pack("=QQQ", self.fs, net, scoped)
        elif version >= 4:
            attr = struct.pack("=QQ", self.fs, net)
        else:
            attr = struct.pack("=Q", self.fs)
        buf = ctypes.create_string_buffer(attr, len(attr))
        self.fd = _call(_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        self.made = time.monotonic()

    def allow_fd(self, fd: int, rights: int, *, is_dir: bool) -> None:
        """Grant ``rights`` beneath the file or directory open as ``fd`` (O_PATH is enough)."""
        rule = prepare(self.version, fd, rights, is_dir=is_dir)
        if rule is not None:
            self.add(rule)

    def add(self, rule: ctypes.Array[ctypes.c_char]) -> None:
        """Add a rule ``prepare`` made (a ruleset of a few hundred: ~1.5 us a rule)."""
        _call(_ADD_RULE, self.fd, _RULE_PATH_BENEATH, rule, 0)

    def allow(self, path: str, rights: int, *, follow: bool = True) -> bool:
        """Grant ``rights`` beneath ``path`` (``follow``: through a final symlink); False when
        it does not exist (nothing granted)."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
        except OSError:
            return False
        try:
            self.allow_fd(fd, rights, is_dir=_is_dir(fd))
        finally:
            os.close(fd)
        return True

    def enforce(self) -> None:
        """Restrict this process (and what it execs) to the ruleset, for good."""
        if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        _call(_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))

    def close(self) -> None:
        os.close(self.fd)


def prepare(
    version: int, fd: int, rights: int, *, is_dir: bool
) -> ctypes.Array[ctypes.c_char] | None:
    """A path-beneath rule for ``Ruleset.add``, made once for many rulesets: ``rights`` (those
    ABI ``version`` knows, and only a file's on a file) beneath the path open as ``fd``. None
    when no right is left."""
    known = fs_rights(version)
    rights &= known if is_dir else known & FILE_RIGHTS
    if not rights:
        return None
    return ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)


def _is_dir(fd: int) -> bool:
    import stat

    return stat.S_ISDIR(os.fstat(fd).st_mode)


def outside(root: str, *, within: str = "/") -> Iterator[str]:
    """Paths that together are all of ``within`` but ``root`` (real, absolute paths): the
    entries of each directory from ``within`` down to ``root``'s parent, but the one on the way;
    ``within`` itself when ``root`` is not in it; nothing when ``root`` is ``within``."""
    within = within.rstrip("/") or "/"
    if root == within:
        return
    if within != "/" and not root.startswith(within + "/"):
        yield within
        return
    here = within
    for part in root[len(within) :].strip("/").split("/"):
        try:
            names = os.listdir(here)
        except OSError:
            names = []
        for name in names:
            if name != part:
                yield os.path.join(here, name)
        here = os.path.join(here, part)
