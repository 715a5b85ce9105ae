"""The sandbox's spawner: a small process that starts runner's commands, each confined.

Started by runner (runner/expr/confined.py) with ``python -I -S``, which runs the C loop where
it was built, else loads this file by its path (its bytecode cached) and calls ``main(FD)``;
inside one ``bwrap`` per apply where there is bubblewrap (its own pid namespace, whose pid 1 it
is, and its own network namespace unless steps may reach the network), else directly. It is not
imported as part of the package: it uses only the standard library and ``landlock.py`` beside
it, so it starts in ~20 ms of CPU (the C loop in ~7) and holds nothing of runner's (no key, no
journal, no environment of runner's, no other step's environment but the request it serves).

Two loops answer the same requests: the C one (_spawnc.c, _spawnc_rules.c; built at install
where there is a C compiler: ~0.1 ms a command) and, where it was not built, the Python one
below (~0.6 ms a command more: the cost issue 40 measured). Runner and the spawner talk over one
SOCK_SEQPACKET socket (descriptor FD), one message each way per event. Every message from
runner is a list of tagged fields (``parse``; _spawnc.c's comment lists the tags), the first
``iID`` (a request; ID is runner's number for it) or ``kID`` (kill request ID's command). A
request's message carries three descriptors, stdin, stdout and stderr, and a fourth, a memory
file holding the fields after the ID, when the request is large. The command starts in a new
session, restricted by the request's Landlock rules (all of / but the project readable, the
temporary directories writable, then the step's own paths), with its redirections opened, and
runs. The spawner answers ``exit ID STATUS`` (a raw wait status) once the command has ended and
its process group was killed, or ``error ID WHY``; ``kID`` kills the group at once (its exit is
then said as any other). Runner's end closing (runner exited, however) kills every group and
ends it. The spawner's first word is ``ready ABI LOOP PROTOCOL`` (the kernel's Landlock ABI, which
loop, the protocol's version).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
landlock: Any = None  # landlock.py beside this file, loaded by the Python loop only


def _load_landlock() -> None:
    global landlock, _libc
    spec = importlib.util.spec_from_file_location(
        "runner_landlock", os.path.join(_HERE, "landlock.py")
    )
    assert spec is not None and spec.loader is not None
    landlock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(landlock)
    _libc = ctypes.CDLL(None, use_errno=True)


PROTOCOL = 2  # said in the first word (_spawnc.h's SPAWNC_PROTOCOL; confined.PROTOCOL)
_MAX_HEADER = 1 << 20
_CLONE_FS = 0x200
_BASE_SECONDS = 5.0
_SPARE = 8  # empty scratch directories kept for the next commands
_ROOTS = 4  # roots whose grants are kept open (a descriptor a path beside each ancestor)
_libc: Any = None
_DEFAULT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ", "SIGINT", "SIGQUIT")
    if hasattr(signal, name)
)
# Outside the project: readable (and executable) everywhere, writable only in these.
_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
_DEVICES = "/dev"


class _Base:
    """What every command beneath one project root is granted, opened once per root: all of /
    but the root readable, the temporary directories but the root writable, /dev whole."""

    def __init__(self, root: str, abi: int) -> None:
        self.root = root
        self.abi = abi
        self.fds: list[int] = []  # O_PATH descriptors the rules name, open while they are used
        self.rules: list[Any] = []  # landlock.prepare's, one a path
        # Beyond a share of the descriptor limit (1,024 on many systems; a project beside a
        # thousand entries), the paths are opened for each ruleset instead (~4 us a rule more).
        self.keep = _descriptor_limit() // (4 * _ROOTS)
        self.later: list[tuple[str, int]] = []
        self.made = time.monotonic()
        write = landlock.EVERYTHING & ~landlock.IOCTL_DEV
        rights: dict[str, int] = {}  # one rule a path (a project in /tmp: read and write alike)
        for path in landlock.outside(root):
            rights[path] = rights.get(path, 0) | landlock.READ
        for top in _WRITABLE:
            for path in landlock.outside(root, within=os.path.realpath(top)):
                rights[path] = rights.get(path, 0) | write
        rights[_DEVICES] = landlock.EVERYTHING
        for path, granted in rights.items():
            self._add(path, granted)

    def _add(self, path: str, rights: int) -> None:
        if len(self.fds) >= self.keep:
            self.later.append((path, rights))
            return
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        except OSError:
            os.close(fd)
            return
        self.fds.append(fd)
        rule = landlock.prepare(self.abi, fd, rights, is_dir=is_dir)
        if rule is not None:
            self.rules.append(rule)

    def ruleset(self, network: bool) -> Any:
        """A new ruleset holding these grants, for one command (a few hundred rules: ~1 us
        each, made ahead of the command that takes it: Spawner.prebuilt)."""
        rules = landlock.Ruleset(self.abi, network=network)
        for rule in self.rules:
            rules.add(rule)
        for path, granted in self.later:
            rules.allow(path, granted, follow=False)
        return rules

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


class Spawner:
    def __init__(self, control: socket.socket) -> None:
        _load_landlock()
        self.control = control
        self.abi = landlock.abi()
        self.bases: dict[str, _Base] = {}
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, self._request)
        self.running: dict[int, tuple[int, int, str | None]] = {}  # pid: request id, pidfd, scratch
        self.scratches: str | None = None  # the directory each command's TMPDIR is made in
        self.prebuilt: tuple[str, bool, Any] | None = None  # (root, network, landlock.Ruleset)
        self.wanted: tuple[str, bool] | None = None
        self.made = 0
        self.spare: list[str] = []  # scratch directories a finished command left empty

    def serve(self) -> None:
        while True:
            for key, _events in self.selector.select():
                key.data(key.fileobj)

    def _answer(self, text: str) -> None:
        with contextlib.suppress(OSError):  # (runner gone: the next read ends the spawner)
            self.control.send(text.encode(errors="surrogateescape"))

    def _request(self, control: socket.socket) -> None:
        try:
            message, fds, flags, _addr = socket.recv_fds(
                control, _MAX_HEADER, 5, socket.MSG_CMSG_CLOEXEC
            )
        except OSError:
            message, fds, flags = b"", [], 0
        if not message:  # runner is gone: nothing it started may outlive it
            for pid in list(self.running):
                _kill(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            if self.scratches is not None:
                _rmtree(self.scratches, ignore_errors=True)
            os._exit(0)
        tag, rid, header = _first_field(message)
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            tag = ""
        if tag == "k":
            for fd in fds:
                os.close(fd)
            for pid, (running, _pidfd, _scratch) in self.running.items():
                if running == rid:
                    _kill(pid)  # its exit is said when it is reaped
            return
        if tag != "i" or len(fds) < 3:
            for fd in fds:
                os.close(fd)
            self._answer(f"error {rid if tag == 'i' else 0} malformed request")
            return
        try:
            if len(fds) > 3:  # a large request's fields travel in a memory file
                with os.fdopen(fds[3], "rb") as f:
                    header = f.read()
            request = parse(header)
            scratch = self._scratch() if request.get("scratch") else None
            pid = self._fork(request, fds[0], fds[1], fds[2], scratch)
        except Exception as exc:
            self._answer(f"error {rid} {exc}")
            return
        finally:
            for fd in fds[:3]:
                os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.running[pid] = (rid, pidfd, scratch)
        self.selector.register(pidfd, selectors.EVENT_READ, lambda _f, p=pid: self._exited(p))

    def _exited(self, _pid: int) -> None:
        """A command ended: reap every child that has (in its bwrap the spawner is pid 1, so a
        process a command left in a session of its own comes to it when orphaned)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.running:
                self._finish(pid, status)

    def _finish(self, pid: int, status: int) -> None:
        _kill(pid)  # what it left running in the background goes with it
        rid, pidfd, scratch = self.running.pop(pid)
        self._answer(f"exit {rid} {status}")  # runner goes on first; the spawner tidies after
        self.selector.unregister(pidfd)
        os.close(pidfd)
        if scratch is not None:
            try:
                empty = not os.listdir(scratch)
            except OSError:
                empty = False
            if empty and len(self.spare) < _SPARE:
                self.spare.append(scratch)  # the next command's, if still empty then
            else:
                _rmtree(scratch, ignore_errors=True)
        if self.wanted is not None and self.prebuilt is None:
            # while runner stores what the command made, the next command's base rules
            root, network = self.wanted
            self.prebuilt = (root, network, self._base(root).ruleset(network))

    def _scratch(self) -> str:
        """An empty scratch directory for one command, beneath this spawner's own: one a
        finished command left empty (still empty now), else a new one. (A directory made and
        removed a command cost ext4 ~0.2 ms of wall: its allocator looks for recently freed
        inodes.)"""
        while self.spare:
            path = self.spare.pop()
            try:
                if not os.listdir(path):
                    return path
            except OSError:
                continue
            _rmtree(path, ignore_errors=True)
        if self.scratches is None:
            self.scratches = _own_directory()
        self.made += 1
        path = f"{self.scratches}/{self.made}"
        os.mkdir(path, 0o700)
        return path

    def _base(self, root: str) -> _Base:
        """The root's base grants, made again after a few seconds: a long-lived runner
        (`watch`, `serve`) sees directories made beside the project's ancestors since."""
        base = self.bases.get(root)
        if base is not None and time.monotonic() - base.made > _BASE_SECONDS:
            self.bases.pop(root).close()
            base = None
        if base is None:
            if len(self.bases) >= _ROOTS:
                self.bases.pop(next(iter(self.bases))).close()
            base = self.bases[root] = _Base(root, self.abi)
        return base

    def _fork(
        self, request: dict[str, Any], stdin: int, out: int, err: int, scratch: str | None
    ) -> int:
        root, network = request.get("root") or "", bool(request.get("network"))
        rules = None
        if root and self.abi:
            rules = self._ruleset(root, network)
        started: list[int | BaseException] = []
        # Landlock restricts the thread that asks (and what it starts), for good: a thread of
        # its own per command, which starts it with posix_spawn (a vfork: ~5x cheaper than a
        # fork of this process) and ends.
        thread = threading.Thread(
            target=_start, args=(rules, request, stdin, out, err, scratch, started)
        )
        thread.start()
        thread.join()
        if rules is not None:
            rules.close()
            self.wanted = (root, network)  # the next command's, made once this one is answered
        if isinstance(started[0], BaseException):
            raise started[0]
        return started[0]

    def _ruleset(self, root: str, network: bool) -> Any:
        """The base rules of ``root`` for one command: the one made ahead after the last
        command, when it is for the same root and network and its grants are not stale."""
        base = self._base(root)
        if self.prebuilt is not None:
            made_root, made_network, rules = self.prebuilt
            self.prebuilt = None
            if (made_root, made_network) == (root, network) and rules.made >= base.made:
                return rules
            rules.close()
        return base.ruleset(network)


def _first_field(message: bytes) -> tuple[str, int, bytes]:
    """A message's first field, ``iID`` or ``kID``: its tag, the ID, and the fields after it;
    ("", 0, b"") when it is neither."""
    first, nul, rest = message.partition(b"\0")
    digits = first[1:]
    if not nul or first[:1] not in (b"i", b"k") or not digits.isdigit():
        return "", 0, b""
    return chr(first[0]), int(digits), rest


_LISTS = {"e": "env", "r": "read", "w": "write", "W": "write_dirs", "a": "argv", "E": "direct_env"}


def parse(header: bytes) -> dict[str, Any]:
    """A request's header: fields of a tag byte, a value and a NUL (_spawnc.c's comment lists
    them), as the names the Python loop uses."""
    if not header.endswith(b"\0"):
        raise ValueError("malformed request")
    request: dict[str, Any] = {"read": [], "write": [], "write_dirs": [], "redirects": []}
    lists: dict[str, list[str]] = {name: [] for name in _LISTS.values()}
    for field in header[:-1].split(b"\0"):
        tag, value = chr(field[0]), os.fsdecode(field[1:])
        if tag in _LISTS:
            lists[_LISTS[tag]].append(value)
        elif tag == "o":
            fd, flags, name = value.split(" ", 2)
            request["redirects"].append((int(fd), name, int(flags)))
        elif tag in "cdRpS":
            names = {"c": "command", "d": "cwd", "R": "root", "p": "path", "S": "search"}
            request[names[tag]] = value
        elif tag in "ns":
            request[{"n": "network", "s": "scratch"}[tag]] = True
        else:
            raise ValueError("malformed request")
    request.update(read=lists["read"], write=lists["write"], write_dirs=lists["write_dirs"])
    request["env"] = dict(v.split("=", 1) for v in lists["env"])
    if "path" in request and lists["argv"]:
        request["direct"] = {
            "path": request.pop("path"),
            "argv": lists["argv"],
            "env": dict(v.split("=", 1) for v in lists["direct_env"]),
            "redirects": request.pop("redirects"),
            "search": request.pop("search", None),
        }
    return request


def _start(
    rules: Any,
    request: dict[str, Any],
    stdin: int,
    out: int,
    err: int,
    scratch: str | None,
    started: list[int | BaseException],
) -> None:
    try:
        started.append(_restricted_spawn(rules, request, stdin, out, err, scratch))
    except BaseException as exc:
        started.append(exc)


def _restricted_spawn(
    rules: Any,
    request: dict[str, Any],
    stdin: int,
    out: int,
    err: int,
    scratch: str | None,
) -> int:
    """Restrict this thread with ``rules`` (the root's base rules, None: no Landlock) and the
    request's own, then start the command from it (it inherits the restriction)."""
    if _libc.unshare(_CLONE_FS) != 0:  # a working directory of this thread's own
        raise OSError(ctypes.get_errno(), "unshare(CLONE_FS)")
    os.chdir(request["cwd"])
    env = request["env"]
    if scratch is not None:
        env = {**env, "TMPDIR": scratch}
    if rules is not None:
        for path in request.get("read", ()):
            rules.allow(path, landlock.READ)
        for path in request.get("write", ()):
            rules.allow(path, landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE)
        for path in request.get("write_dirs", ()):
            rules.allow(path, landlock.EVERYTHING & ~landlock.IOCTL_DEV)
        if scratch is not None:
            rules.allow(scratch, landlock.EVERYTHING & ~landlock.IOCTL_DEV)
        rules.enforce()
    streams = [
        (os.POSIX_SPAWN_DUP2, stdin, 0),
        (os.POSIX_SPAWN_DUP2, out, 1),
        (os.POSIX_SPAWN_DUP2, err, 2),
    ]
    direct = request.get("direct")
    if direct is not None:  # a simple command, started as dash would (runner/expr/shellrun.py)
        exported = direct["env"] if scratch is None else {**direct["env"], "TMPDIR": scratch}
        opens = [
            (os.POSIX_SPAWN_OPEN, fd, name, flags, 0o666) for fd, name, flags in direct["redirects"]
        ]
        path = direct["path"]
        if direct["search"] is not None and "/" not in path:
            path = _find_program(direct["search"], path)  # none: the shell says so
        try:
            if path is not None:
                return _spawn(path, direct["argv"], exported, streams + opens)
        except OSError:  # dash does it again, and says why it fails in its own words
            pass
    return _spawn("/bin/sh", ["/bin/sh", "-c", request["command"]], env, streams)


def _find_program(search: str, name: str) -> str | None:
    """The file dash would execute for ``name`` along ``search`` (an empty entry is the
    working directory): the first regular, executable file."""
    for entry in search.split(":"):
        path = f"{entry or '.'}/{name}"
        try:
            if stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.X_OK):
                return path
        except OSError:
            continue
    return None


def _spawn(path: str, argv: list[str], env: dict[str, str], actions: list[Any]) -> int:
    return os.posix_spawn(
        path, argv, env, file_actions=actions, setsid=True, setsigdef=_DEFAULT_SIGNALS
    )


def _rmtree(path: str, ignore_errors: bool = True) -> None:
    import shutil  # (rarely: a command that left files in its scratch directory)

    shutil.rmtree(path, ignore_errors=ignore_errors)


def _own_directory() -> str:
    """A new directory in $TMPDIR (or /tmp) that only this process uses (tempfile's mkdtemp,
    without importing tempfile and random: ~10 ms of the spawner's start)."""
    parent = os.environ.get("TMPDIR") or "/tmp"
    for attempt in range(100):
        path = f"{parent}/runner-scratch-{os.getpid()}-{time.time_ns()}-{attempt}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no new scratch directory in {parent}")


def _descriptor_limit() -> int:
    import resource

    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def main(fd: str | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # runner's ^C is runner's to handle
    control = socket.socket(fileno=int(fd if fd is not None else sys.argv[1]))
    os.set_inheritable(control.fileno(), False)
    spawner = Spawner(control)
    control.send(f"ready {spawner.abi} python {PROTOCOL}".encode())
    spawner.serve()


if __name__ == "__main__":
    main()
