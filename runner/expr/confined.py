"""Commands confined to what their step declares: the spawner they start from, and its sandbox.

A step's command (a ``shell`` step's ``run``, an ``exec`` check, a ``when: {exec: ...}``) may
read, inside the project, only the files its step declares (``Confinement.read``), write only
its declared outputs (``write``, ``write_dirs``) and a scratch directory of its own, and reach the
network only when the step says ``network: true``. Everything outside the project stays readable
(the tools a command runs, their libraries), and writable only in the temporary directories. So
a file a command reads is a file its key holds: an undeclared read fails (``undeclared``
names it from what the command said), it never becomes a stale reuse. The one exception is an
output's directory below the project's top (``write_dirs``): Landlock grants a directory's
files together, and a tool's temporary file beside its output must be written, read back and
renamed, so the other files there are readable too (docs/steps.md says so).

How (Linux): runner starts one spawner (runner/expr/_spawner.py) per network setting, inside
one ``bwrap`` each where bubblewrap can run -- its own pid namespace (no step sees runner's
``/proc/PID/environ`` or memory), and its own network namespace for steps without ``network:
true``. The spawner starts each command restricted by Landlock rules (its C loop, _spawnc.c,
where it was built at install; else its Python loop); runner only sends a message, so its event
loop never waits on an exec.
Without bubblewrap (or where it cannot make namespaces), Landlock alone confines files and TCP;
without Landlock (an old kernel, macOS) commands run unconfined, and ``status()`` says so once.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .spawnchannel import Channel

_HERE = str(Path(__file__).parent)
# The spawner's process: the C loop's program where it was built (setup.py; ~1 ms to start);
# else an interpreter that imports its module and nothing else (~7 ms, most of it the
# interpreter's own); else _spawner.py loaded as a module, not run as a script, so that its
# compiled bytecode is used. RUNNER_SPAWNER=module or =python picks one of the latter (tests).
_PROGRAM = os.path.join(_HERE, "_spawnc_exec")
_START = """import sys, os
here, fd = sys.argv[1], sys.argv[2]
if os.environ.get("RUNNER_SPAWNER") != "python":
    sys.path.insert(0, here)
    try:
        import _spawnc
    except ImportError:
        pass
    else:
        _spawnc.serve(int(fd))
    del sys.path[0]
import importlib.util as u
s = u.spec_from_file_location("runner_spawner", here + "/_spawner.py")
m = u.module_from_spec(s)
s.loader.exec_module(m)
m.main(fd)
"""
# The spawner protocol's version (_spawnc.h's SPAWNC_PROTOCOL, _spawner.py's PROTOCOL): a C loop
# built from older sources says another (or none), and the Python loop answers instead.
PROTOCOL = b"2"
_INLINE_HEADER = 32 * 1024  # larger headers (a long value in the environment) go in a memfd
_READY_TIMEOUT = 10.0


@dataclass(frozen=True)
class Confinement:
    """What one command may touch beyond everything outside the project. Paths are absolute
    real paths; ``root`` is the project's."""

    root: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()  # files: read, written, truncated
    write_dirs: tuple[str, ...] = ()  # directories whose files may be made, read, written, removed
    network: bool = False


@dataclass(frozen=True)
class Status:
    """How commands are confined on this machine: ``kind`` is "bubblewrap+landlock",
    "landlock" or "none"; ``note`` says what is missing, once, where it is not the first."""

    kind: str
    note: str = ""

    @property
    def confines(self) -> bool:
        return self.kind != "none"


class SandboxError(OSError):
    """The spawner could not start a command (said as the command's failure to start)."""


class _Stale(SandboxError):
    """The built C loop speaks another protocol than this runner's (built before a change)."""


_fallback_note: str | None = None
# The kernel's Landlock ABI, as the spawner found it (None: no spawner started yet). Probed there,
# so that runner's own process never loads ctypes for it.
_abi: int | None = None


def status() -> Status:
    """How commands are confined here (bubblewrap found and working, Landlock's ABI). Before a
    spawner has started, Linux is taken to have Landlock; the first spawner says."""
    abi = _abi if sys.platform.startswith("linux") else 0
    if abi == 0:
        where = (
            "this kernel has no Landlock"
            if sys.platform.startswith("linux")
            else (f"{sys.platform} has no sandbox runner can use")
        )
        return Status(
            "none",
            f"{where}: steps' commands run unsandboxed (they can read and write anything you can)",
        )
    if _fallback_note is not None:
        return Status("landlock", _fallback_note)
    if _bwrap() is None:
        return Status(
            "landlock",
            "bubblewrap (bwrap) is not installed: steps' files and TCP "
            "are confined by Landlock, but they share runner's pid and network "
            "namespaces (install the `bubblewrap` package)",
        )
    return Status("bubblewrap+landlock")


_noted = False


@functools.cache
def _bwrap() -> str | None:
    """bubblewrap's path (looked for once a process: each command asks)."""
    return shutil.which("bwrap")


def note_once() -> str | None:
    """What ``status()`` has to say, the first time in this process it is asked; else None."""
    global _noted
    said = status().note
    if _noted or not said:
        return None
    _noted = True
    return said


def _usable_program() -> bool:
    """Whether the spawner's program was built here and is not set aside (RUNNER_SPAWNER)."""
    return not os.environ.get("RUNNER_SPAWNER") and os.access(_PROGRAM, os.X_OK)


class _Host:
    """One spawner, in its bwrap or not; requests go over ``control``."""

    def __init__(
        self, *, bwrap: bool, network: bool, program: bool = True, python: bool = False
    ) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-I", "-S", "-c", _START, _HERE, str(theirs.fileno())]
        program = program and not python and _usable_program()
        if program:
            argv = [_PROGRAM, str(theirs.fileno())]
        if bwrap:
            argv = [
                _bwrap() or "bwrap", "--unshare-pid", "--as-pid-1",
                *(() if network else ("--unshare-net",)),
                "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
                "--", *argv,
            ]  # fmt: skip
            # (--as-pid-1: the spawner reaps what it starts, so the commands' CPU time is
            # counted as runner's children's, as when runner starts them itself)
        # Nothing of runner's environment (a provider's key, the cache's signing key): each
        # request carries its command's own; the spawner needs only where scratch goes.
        # (RUNNER_SPAWNER=module or =python: that loop even where the program was built)
        env = {k: os.environ[k] for k in ("TMPDIR", "RUNNER_SPAWNER") if k in os.environ}
        if python:
            env["RUNNER_SPAWNER"] = "python"
        try:
            self.process = subprocess.Popen(
                argv,
                env=env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except BaseException:  # (no process: a full disk, no memory, no such interpreter)
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        # which loop answers: "program" (_spawnc_exec), "module" (_spawnc's) or "python"
        self.loop = ""
        self._ready()
        if self.loop == "c":
            self.loop = "program" if program else "module"

    def _ready(self) -> None:
        """Wait for the spawner's first word: ``ready ABI`` (or its failure to start, said)."""
        global _abi
        self.control.settimeout(_READY_TIMEOUT)
        try:
            said = self.control.recv(64)
        except OSError:
            said = b""
        self.control.settimeout(None)
        word, abi, loop, protocol = (said.split(b" ") + [b""] * 4)[:4]
        if word == b"ready" and abi.isdigit() and protocol == PROTOCOL:
            _abi = int(abi)
            self.loop = loop.decode()
        elif word == b"ready":
            self.close()
            if self.process.stderr is not None:
                self.process.stderr.close()
            raise _Stale(f"the spawner's {loop.decode()} loop speaks protocol {protocol!r}")
        else:
            self.close()
            detail = b""
            if self.process.stderr is not None:
                with contextlib.suppress(OSError, ValueError):
                    detail = self.process.stderr.read(2000)
                self.process.stderr.close()
            raise SandboxError(detail.decode(errors="replace").strip() or "it did not start")
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.channel = Channel(self.control)

    def close(self) -> None:
        """End the spawner: its end of the socket closing ends it (and what runs), so that its
        CPU time is counted as runner's children's; killed if it does not end in 2 s."""
        channel: Channel | None = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
        else:
            with contextlib.suppress(OSError):
                self.control.close()
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                self.process.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.process.wait(5)


_hosts: dict[bool, _Host] = {}
_hosts_lock = threading.Lock()


def _host(network: bool) -> _Host:
    """The spawner for ``network`` (one for both when there is no bubblewrap): the running one,
    else a new one (a spawner that ended is closed and forgotten)."""
    global _fallback_note
    key = network if status().kind == "bubblewrap+landlock" else False
    with _hosts_lock:
        old = _hosts.pop(key, None)
        if old is not None:
            if old.process.poll() is None:
                _hosts[key] = old
                return old
            old.close()
        host: _Host | None = None
        if status().kind == "bubblewrap+landlock":
            try:
                host = _started(bwrap=True, network=network)
            except (OSError, SandboxError) as exc:
                _fallback_note = (
                    f"bubblewrap could not make a sandbox here ({_first_line(exc)}): steps' "
                    "files and TCP are confined by Landlock only"
                )
                key = False
                host = _hosts.get(False)
                if host is not None and host.process.poll() is not None:
                    del _hosts[False]
                    host.close()
                    host = None
        if host is None:
            host = _started(bwrap=False, network=True)
        _hosts[key] = host
        return host


_program_failed = False  # the spawner's program could not run here (a noexec mount, ...)


_c_stale = False  # the built C loop speaks an older protocol (built before a change of it)


def _started(*, bwrap: bool, network: bool) -> _Host:
    """A new spawner: its program where it was built and runs, else its module or Python loop
    (a program that fails to start is not tried again in this process; a C loop built from
    sources older than this runner's protocol is not used at all: the Python loop answers)."""
    global _program_failed, _c_stale
    try:
        try:
            return _Host(bwrap=bwrap, network=network, program=not _program_failed, python=_c_stale)
        except _Stale:
            raise
        except (OSError, SandboxError):
            if _program_failed or not _usable_program():
                raise
            _program_failed = True
            return _Host(bwrap=bwrap, network=network, program=False)
    except _Stale:  # (test_spawner_loops.py fails while the built loop is older than its source)
        _c_stale = True
        return _Host(bwrap=bwrap, network=network, python=True)


def warm(networks: Iterable[bool]) -> None:
    """Start the spawners for these network settings now, in a thread, so that the engine's
    work before its first command hides their start (~7 ms of CPU, 20-30 ms of wall). A
    spawner that cannot start is left to the first command, which says why."""
    if not status().confines:
        return

    def start() -> None:
        for network in sorted(set(networks)):
            with contextlib.suppress(OSError, SandboxError):
                _host(network)

    threading.Thread(target=start, name="runner-sandbox-warm", daemon=True).start()


def _forget(host: _Host) -> None:
    """A spawner that stopped answering: closed, and not handed out again."""
    with _hosts_lock:
        for key, held in list(_hosts.items()):
            if held is host:
                del _hosts[key]
    host.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


@atexit.register
def _close_hosts() -> None:
    for host in list(_hosts.values()):
        host.close()
    _hosts.clear()


async def run_confined(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    direct: Mapping[str, object] | None,
    confine: Confinement,
    stdin: int,
    out: int,
    err: int,
    timeout: float | None,
    scratch: bool = True,
) -> int | None:
    """Run ``/bin/sh -c command`` (or ``direct``: a simple command's path, argv, environment
    and redirections) confined: its raw wait status, or None when ``timeout`` ran out (the group
    is killed). A cancel kills the group and propagates. Raises SandboxError when the spawner
    refuses it. A command whose environment holds a secret runs with no other beside it
    (runner/expr/alone.py); its timeout counts from its start."""
    from .alone import GATE, holds_secret

    header = _header(
        command,
        cwd=str(cwd),
        env=env,
        direct=direct,
        confine=confine,
        read=[*confine.read, *tool_dirs(env.get("PATH", ""), confine.root)],
        scratch=scratch,
    )
    alone = holds_secret(env)
    await GATE.enter(alone)
    try:
        return await _exchange(header, confine.network, [stdin, out, err], timeout)
    finally:
        GATE.leave(alone)


async def _exchange(
    header: bytes, network: bool, streams: list[int], timeout: float | None
) -> int | None:
    """Send one request (with the command's three streams) and wait for its answer."""
    fds = list(streams)
    memo = -1
    try:
        if len(header) > _INLINE_HEADER:
            memo = os.memfd_create("runner-request", os.MFD_CLOEXEC)
            os.write(memo, header)
            os.lseek(memo, 0, os.SEEK_SET)
            fds.append(memo)
            header = b""
        for attempt in (1, 2):  # a spawner that ended since it was last used: a new one
            host = _host(network)
            try:
                said = await host.channel.ask(header, fds, timeout)
                break
            except (BrokenPipeError, ConnectionResetError):
                _forget(host)
                if attempt == 2:
                    raise
    finally:
        if memo >= 0:
            os.close(memo)
    return None if said is None else _ended(said)


def _header(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
    direct: Mapping[str, object] | None,
    confine: Confinement,
    read: Iterable[str],
    scratch: bool,
) -> bytes:
    """A request as the spawner reads it: fields of a tag byte, a value and a NUL
    (runner/expr/_spawnc.c's comment lists the tags). A value holding a NUL cannot reach a
    command (exec takes C strings): refused, as the shell would."""
    # Built as text and encoded once (os.fsencode of each field cost half the header's time);
    # the command alone is UTF-8, as the shell reads it, whatever the filesystem's encoding.
    fields = ["d" + cwd]
    fields += ["e" + k + "=" + v for k, v in env.items()]
    if confine.root:
        fields.append("R" + confine.root)
        fields += ["r" + p for p in read]
        # A file in one of write_dirs needs no rule of its own (its directory's grants all it
        # would): without one, the requests of a fan-out's leaves re-run over their outputs
        # are alike, and the spawner restricts them with the ruleset it keeps (_spawnc_rules.c).
        dirs = set(confine.write_dirs)
        fields += ["w" + p for p in confine.write if os.path.dirname(p) not in dirs]
        fields += ["W" + p for p in confine.write_dirs]
    if confine.network:
        fields.append("n")
    if scratch:
        fields.append("s")
    if direct is not None:
        fields.append("p" + str(direct["path"]))
        if direct.get("search") is not None:  # (the spawner's child finds it, as dash would)
            fields.append("S" + str(direct["search"]))
        fields += ["a" + str(a) for a in direct["argv"]]  # type: ignore[attr-defined]
        exported: Mapping[str, str] = direct["env"]  # type: ignore[assignment]
        fields += ["E" + k + "=" + v for k, v in exported.items()]
        for fd, name, flags in direct["redirects"]:  # type: ignore[attr-defined]
            fields.append(f"o{fd} {flags} {name}")
    text = "\0".join(fields)
    if "\0" in command or text.count("\0") != len(fields) - 1:
        raise SandboxError("a command, its environment or a path holds a NUL byte")
    names = [*env, *(direct["env"] if direct is not None else ())]  # type: ignore[misc]
    illegal = [k for k in names if not k or "=" in k]  # (exec would read A=B=C as A)
    if illegal:
        raise SandboxError(f"illegal environment variable name: {illegal[0]!r}")
    return b"c" + command.encode(errors="surrogateescape") + b"\0" + os.fsencode(text) + b"\0"


@functools.lru_cache(maxsize=64)
def tool_dirs(search: str, root: str) -> tuple[str, ...]:
    """Directories on ``search`` (a PATH) inside the project, readable by its commands: a
    virtual environment's whole tree for its ``bin`` (the interpreter reads its ``lib``), else
    the directory. Tools are not inputs: a step's key does not hold them, as it does not
    hold /usr/bin."""
    inside = root.rstrip("/") + "/"
    found: list[str] = []
    for entry in search.split(":"):
        if not entry.startswith("/"):
            continue
        real = os.path.realpath(entry)
        if not real.startswith(inside):
            continue
        parent = os.path.dirname(real)
        if os.path.isfile(os.path.join(parent, "pyvenv.cfg")):
            real = parent
        if real not in found:
            found.append(real)
    return tuple(found)


def _ended(said: bytes) -> int:
    word, _, rest = said.partition(b" ")
    if word == b"exit":
        return int(rest)
    if word == b"error":
        raise SandboxError(rest.decode(errors="replace"))
    raise SandboxError("the sandbox's spawner ended without saying how the command ended")
