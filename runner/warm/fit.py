"""What a warm server and a command must share for the server's child to be the command's process.

Imported by every `runner apply` before anything else, so it reads /proc and the interpreter's
own state with the standard library's C modules only (no enum, re or json: ~5 ms of imports).
"""

from __future__ import annotations

import os
import sys
import zlib

# The variables read before any Python code runs, by the interpreter (PYTHON*, the locale that
# decides how it decodes and encodes text), the dynamic loader (LD_LIBRARY_PATH, LD_PRELOAD: which
# libraries an extension module loads) and the C library's allocator: a server started with other
# values would differ in what no later setting changes. Everything else a server's imports read
# is recorded by it (server.preload) and compared per command.
_START_UP_PREFIXES = ("PYTHON", "LC_", "LD_", "MALLOC_")
_START_UP_NAMES = ("LANG", "LANGUAGE", "GLIBC_TUNABLES")

# The namespaces a process lives in: another mount namespace sees other files, another pid or
# network namespace other processes and hosts.
_NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts", "cgroup")

OFF_VALUES = ("0", "off", "no", "false")


def enabled(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return environ.get("RUNNER_SERVER", "1").strip().lower() not in OFF_VALUES


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def status_fields() -> dict[bytes, bytes]:
    """/proc/self/status as name -> value (empty off Linux)."""
    fields = {}
    for line in _read("/proc/self/status").splitlines():
        name, _, value = line.partition(b":")
        fields[name] = value.strip()
    return fields


def confined(fields: dict[bytes, bytes]) -> bool:
    """Whether this process is sandboxed or watched: no_new_privs (Landlock and the sandbox's
    steps set it), a seccomp filter, or a tracer (strace, a debugger). Such a process never uses
    a server: the server's child would run outside the sandbox, or untraced."""
    if not fields:
        return True  # no /proc: nothing here can be compared
    return (
        fields.get(b"NoNewPrivs", b"0") != b"0"
        or fields.get(b"Seccomp", b"0") != b"0"
        or fields.get(b"TracerPid", b"0") != b"0"
    )


def identity() -> bytes | None:
    """What a server's child shares with this process and cannot change after it has forked,
    as one byte string; None when no server may answer for this process (not Linux, confined,
    traced, or under a profiler or coverage)."""
    if sys.platform != "linux" or sys.gettrace() is not None or sys.getprofile() is not None:
        return None
    if "coverage" in sys.modules:
        return None
    fields = status_fields()
    if confined(fields):
        return None
    parts: list[object] = [
        sys.hexversion,
        sys.executable,
        tuple(sys.path),
        tuple(sys.flags),
        tuple(sys.warnoptions),
        tuple(sorted(sys._xoptions.items())),
        tuple(
            (name, value)
            for name, value in sorted(os.environ.items())
            if name.startswith(_START_UP_PREFIXES) or name in _START_UP_NAMES
        ),
        (os.getuid(), os.geteuid(), os.getgid(), os.getegid(), tuple(sorted(os.getgroups()))),
        tuple(_link(f"/proc/self/ns/{name}") for name in _NAMESPACES),
        _read("/proc/self/cgroup"),
        _read("/proc/self/attr/current"),  # the security label (AppArmor, SELinux)
        fields.get(b"CapEff", b""),
        fields.get(b"CapBnd", b""),
    ]
    return repr(parts).encode("utf-8", "surrogatepass")


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def digest(ident: bytes) -> str:
    """A short name for ``ident``: the socket's file name. Two identities sharing one only cost
    a refusal (the server compares the whole identity)."""
    return f"{zlib.crc32(ident):08x}{zlib.adler32(ident):08x}"


def socket_dir(environ: os._Environ[str] | dict[str, str] = os.environ) -> str | None:
    """The directory holding this user's server sockets, made private to the user; None when it
    cannot be (another owner, a link, other users' rights)."""
    base = environ.get("RUNNER_SERVER_DIR")
    if not base:
        runtime = environ.get("XDG_RUNTIME_DIR")
        base = os.path.join(runtime, "runner") if runtime else f"/tmp/runner-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(base)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return base


def socket_path(folder: str, ident: bytes) -> str:
    return os.path.join(folder, digest(ident) + ".sock")
