"""A Dask cluster as separate commands (``dask scheduler`` + ``dask worker`` processes: what a
real cluster looks like), for the tests and bench/bench_dask.py. Imports dask only when called."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def command_line_cluster(
    workers: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> Iterator[str]:
    """``dask scheduler`` on 127.0.0.1 and one ``dask worker`` per entry of ``workers`` (each
    entry: extra arguments, e.g. ``["--nthreads", "4"]``); yields the scheduler's address once
    every worker has joined, and stops them all on exit."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    environ = dict(env if env is not None else os.environ)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": environ}
    procs = [
        subprocess.Popen(
            [
                *("dask", "scheduler", "--host", "127.0.0.1", "--port", str(port)),
                *("--dashboard-address", ":0", "--no-show"),
            ],
            **quiet,  # type: ignore[call-overload]
        )
    ]
    try:
        _wait_listening(port, timeout)
        for extra in workers:
            procs.append(
                subprocess.Popen(
                    ["dask", "worker", address, "--no-dashboard", *extra],
                    **quiet,  # type: ignore[call-overload]
                )
            )
        from distributed import Client

        with Client(address, timeout=timeout) as client:  # type: ignore[no-untyped-call]
            client.wait_for_workers(len(workers), timeout=timeout)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _wait_listening(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"no Dask scheduler listening on port {port} after {timeout:g}s")


def runner_tracebacks(stderr: str) -> list[str]:
    """The tracebacks in ``stderr`` that pass through runner's own code, and runner's own "hit a
    bug" report. A LocalCluster's worker processes share the apply's stderr, and Dask may print
    a traceback of its own while it stops them on a loaded machine (a heartbeat cut short, an
    event loop collected at exit): that is Dask's noise, not a failure of runner."""
    import runner

    package = os.path.dirname(runner.__file__)
    found: list[str] = []
    block: list[str] | None = None
    for line in stderr.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            block = [line]
            continue
        if block is not None:
            block.append(line)
            if line and not line[0].isspace():  # the exception line ends the block
                if any(f'File "{package}' in b for b in block):
                    found.append("\n".join(block))
                block = None
    if "runner hit a bug" in stderr:
        found.append("runner hit a bug")
    return found
