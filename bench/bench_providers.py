"""Benchmark: the image step over the fake provider (concurrency and per-call overhead).

The step runs as inside an apply: the real journal as its idempotency ledger (one committed row
before and one after every paid call), batched journal commits, and objects made durable in
groups right before the journal records them (``Journal.before_commit = ObjectStore.sync``).
Every timed section ends with the apply's final commit and fsyncs.

1. 64 calls with a 200 ms provider delay at concurrency 16 and at 1: wall time against the ideal
   (ceil(64 / c) * 0.2 s of waiting); a ratio near 1.0 means the cap, not the engine, sets the
   pace. Concurrency 16 is repeated (``--repeat``) and its median shown.
2. Overhead per call at delay 0: the step's wall time per call minus the fake's own drawing and
   PNG encoding time (the provider called directly, same sizes, median of the repeats), i.e.
   keys, ledger rows, call logs, the image check, the object store and its fsyncs. At
   concurrency 16 the drawing runs in worker threads beside that work, so the figure there is
   per call of throughput. Wall time on a shared machine is noisy, so CPU time (all threads,
   and the event loop's thread alone) is shown too, with the fake's own CPU subtracted the same
   way. SQLite statements per call are counted on the journal connection.

3. Over real sockets (loopback servers in this process answering after 200 ms, measuring calls
   in flight server-side): an ``llm`` for_each of 64 calls at concurrency 16 as a whole
   ``runner apply`` process with ``--jobs`` at its default, side by side with a plain asyncio +
   httpx script making the same 64 calls 16 at a time (both processes with bytecode cached), the
   script in a venv holding httpx alone (built under ~/.cache/runner-bench/httpx from PyPI
   when missing, or --httpx-python): in runner's environment `import httpx` also loads its
   command-line client's rich and click, which a user of plain httpx does not pay;
   and the image step over a pool of 4 backends x max_concurrency 4 (64 calls, in process)
   against the 0.8 s ideal (64 / 16 x 200 ms).
4. Engine overhead per call at delay 0, in process: an ``llm`` for_each over the fake provider
   applied as ``runner apply`` does (compile, journal, keys, ledger rows, call logs, objects,
   checks), minus the fake's own time per call (called directly), per element; concurrency 16,
   median of the repeats.

    /work/venv/bin/python bench/bench_providers.py [--calls 64] [--size 256x256] [--repeat 5]
    /work/venv/bin/python bench/bench_providers.py --only sockets   # section 3 alone
    /work/venv/bin/python bench/bench_providers.py --only overhead  # section 4 alone
    # before vs after, side by side in one run (DIR: a checkout of the earlier commit):
    /work/venv/bin/python bench/bench_providers.py --only sockets --before DIR
    # runner in a venv like the peer's (no editable finder or other .pth file at its start):
    /work/venv/bin/python bench/bench_providers.py --only llm --python ~/.cache/runner-bench/runner/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Appended, not put first: with --before, PYTHONPATH names the runner tree to measure.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench._common import ENV, compile_tree
from runner.engine.run.recorder import JournalLedger
from runner.providers import ImageRequest, Provider, create
from runner.state.journal import Journal
from runner.state.objects import ObjectStore
from runner.steps.base import StepContext, StepEnv, StepResult
from runner.steps.image import ImageStep
from runner.warm import control

REPO = Path(__file__).resolve().parents[1]


class Servers:
    """Loopback servers (tests/providers/loadserver.py) in a process of their own."""

    def __init__(self, count: int, delay: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.providers.loadserver", str(count), str(delay)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.urls: list[str] = self._answer()

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def ask(self, what: str) -> list[list[int]]:
        """``reset`` or ``stats``: [[most in flight, served], ...] per server."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        answer: list[list[int]] = self._answer()
        return answer

    def cpu(self) -> float:
        """CPU seconds the servers' process has used so far (every thread)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("cpu\n")
        self.proc.stdin.flush()
        return float(self._answer())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


class Access:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def get(self, name: str | None) -> Provider:
        return self.provider

    def default_name(self) -> str:
        return self.provider.name


@dataclass
class Timing:
    wall: float
    cpu: float  # process CPU (every thread), the less noisy figure on a shared machine
    main_cpu: float  # the event loop's thread alone
    statements: int


def run_step(
    state: Path, provider: Provider, calls: int, concurrency: int, size: str, tag: str
) -> Timing:
    """One image step of ``calls`` iterations, set up as Interpreter.apply sets up a run."""
    objects = ObjectStore(state / "objects")
    journal = Journal.open(state)
    journal.create_run({"id": tag, "pipeline": "bench", "status": "running", "created_at": 0.0})
    statements = 0

    def count(_sql: str) -> None:
        nonlocal statements
        statements += 1

    journal.conn.set_trace_callback(count)
    journal.batch_commits()
    objects.defer_sync()
    journal.before_commit = objects.sync
    env = StepEnv(root=state.parent, state_dir=state, objects=objects, providers=Access(provider))
    ledger = JournalLedger(journal, tag, "gen")
    ctx = StepContext(env=env, run_id=tag, step_id="gen", ledger=ledger)
    args = {"prompt": f"benchmark {tag}", "n": calls, "size": size, "concurrency": concurrency}
    start, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()

    async def step() -> StepResult:
        provider.keep_clients()  # as a run does: one client per backend, closed at its end
        try:
            return await ImageStep().run(ctx, args)
        finally:
            await provider.aclose()

    try:
        result = asyncio.run(step())
        journal.end_batch()  # the apply's last commit and fsyncs are part of the wall time
        journal.before_commit = None
        objects.stop_deferring()
        timing = Timing(
            time.perf_counter() - start,
            time.process_time() - cpu,
            time.thread_time() - main_cpu,
            statements,
        )
    finally:
        journal.close()
    assert result.output["failed"] == 0 and result.output["completed"] == calls
    return timing


def provider_only(provider: Provider, calls: int, size: tuple[int, int]) -> tuple[float, float]:
    """(wall, CPU) seconds per call of the fake alone: drawing and PNG encoding."""

    async def go() -> None:
        for k in range(calls):
            await provider.generate_image(ImageRequest(prompt="raw", seed=k, size=size))

    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(go())
    return (time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls


def durable_put(root: Path, calls: int) -> float:
    """Seconds per object of a durable put (fsync of file and directory): this disk's speed."""
    store = ObjectStore(root / "store-only")
    start = time.perf_counter()
    for k in range(calls):
        store.put_bytes(f"object {k}".encode() * 1000)
    return (time.perf_counter() - start) / calls


FAN_OUT = """\
runner: 1
name: fan
params:
  items: {type: array, default: []}
steps:
  ask:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: CONCURRENCY
    cache: false
    with: {prompt: "say ${{ item }}"}
    check:
      - "${{ output.text | length > 0 }}"
"""

PEER = """\
import asyncio, sys
import httpx

async def main(url: str, n: int, concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        async def one(k: int) -> str:
            async with gate:
                body = {"model": "m", "messages": [{"role": "user", "content": f"say e{k}"}]}
                r = await client.post("/v1/chat/completions", json=body)
                r.raise_for_status()
                return r.json()["choices"][0]["message"]["content"]
        replies = await asyncio.gather(*(one(k) for k in range(n)))
    assert all(r.startswith("ok say") for r in replies)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU user+sys) seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, env={**ENV, **(env or {})}, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:5])} failed:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


HTTPX_VENV = Path.home() / ".cache" / "runner-bench" / "httpx"


def httpx_python(given: str | None) -> str:
    """The interpreter of the plain httpx script: ``given``, or a venv holding httpx alone (made
    under ~/.cache from PyPI the first time: outside the repository, never in runner's env)."""
    if given:
        return given
    python = HTTPX_VENV / "bin" / "python"
    if not python.is_file():
        print(f"making {HTTPX_VENV} (httpx alone, from PyPI)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(HTTPX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "httpx"], check=True)
    return str(python)


def llm_process(
    root: Path,
    calls: int,
    repeat: int,
    before: Path | None,
    peer_python: str | None = None,
    runner_python: str | None = None,
    warm: bool = False,
) -> None:
    """Section 3a: the llm fan-out as a whole process against plain httpx (and, with ``before``,
    the same apply from another source tree, interleaved in the same runs). ``runner_python``:
    runner's interpreter (default: this one; a venv like the peer's gives a user's start-up,
    without this machine's .pth files). ``warm``: a row more, this tree's apply through its warm
    server (runner/warm), its CPU the command's own plus what the server and its child spent."""
    peer = httpx_python(peer_python)
    loaded = subprocess.run(
        [peer, "-c", "import httpx, sys; print(len(sys.modules), 'rich' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        env=ENV,
    ).stdout.split()
    compile_tree()
    runners: dict[str, Path | None] = {"runner": None}
    if before is not None:
        compile_tree(before)
        runners = {"before": before, "runner": None}
    servers = root / "servers"
    if warm:
        runners["warm"] = None
    conc, delay = 16, 0.2
    ideal = math.ceil(calls / conc) * delay
    work = root / "fan"
    work.mkdir()
    (work / "pipeline.yaml").write_text(FAN_OUT.replace("CONCURRENCY", str(conc)), "utf-8")
    (work / "peer.py").write_text(PEER, "utf-8")
    server = Servers(1, delay)
    url = server.urls[0]
    try:
        (work / "runner.toml").write_text(
            textwrap.dedent(
                f"""\
                [general]
                default_provider = "openai"
                [providers.openai]
                base_url = "{url}/v1"
                max_concurrency = {conc}
                """
            ),
            "utf-8",
        )
        python = runner_python or sys.executable
        apply = [python, "-m", "runner", "apply", "pipeline.yaml", "--json", "-q"]
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in [*runners, "httpx"]}
        peaks: dict[str, int] = {}
        warm_env = {"RUNNER_SERVER": "1", "RUNNER_SERVER_DIR": str(servers)}
        if warm:  # start the server (the first apply runs itself) and wait for it
            timed([*apply, "-p", 'items=["warm-up"]'], work, warm_env)
            while not control.statuses(str(servers)):
                time.sleep(0.05)
        for r in range(repeat):
            # new prompts each time: the ledger would answer calls it has seen (never paid twice)
            for name in rows:
                items = json.dumps([f"r{r}-{name}-e{k}" for k in range(calls)])
                tree = runners.get(name)
                cmd = [*apply, "-p", f"items={items}"]
                if name == "httpx":
                    cmd = [peer, "peer.py", url, str(calls), str(conc)]
                server.ask("reset")
                if name == "warm":
                    spent = _server_cpu(servers)
                    wall, cpu = timed(cmd, work, warm_env)
                    rows[name].append((wall, cpu + _server_cpu(servers) - spent))
                else:
                    env = {"PYTHONPATH": str(tree)} if tree else None
                    rows[name].append(timed(cmd, work, env))
                [[peak, served]] = server.ask("stats")
                assert served == calls, (name, served)
                peaks[name] = max(peaks.get(name, 0), peak)
    finally:
        server.close()
        control.stop_all(str(servers))

    def med(name: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[name])

    def paired(name: str, i: int, to: str = "httpx") -> str:
        """The median of the rounds' ratios to ``to`` (plain httpx) [their range]."""
        ratios = [a[i] / b[i] for a, b in zip(rows[name], rows[to], strict=True)]
        return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"

    print(
        f"llm for_each, {calls} calls x {delay * 1000:.0f} ms at concurrency {conc}, whole "
        f"process, --jobs default ({os.cpu_count()} cores), median of {repeat}, load average "
        f"{os.getloadavg()[0]:.1f}:"
    )
    labels = {
        "before": f"runner {before}",
        "runner": "runner (this tree)",
        "warm": "runner, warm server",
        "httpx": "plain httpx",
    }
    print(
        f"  plain httpx runs on {peer}: `import httpx` loads {loaded[0]} modules"
        f"{', rich among them' if loaded[1] == 'True' else ', not rich'}; runner on "
        f"{runner_python or sys.executable}"
    )
    for name in rows:
        ratio = ""
        if name != "httpx":
            ratio = (
                f"; to httpx, round by round: wall {paired(name, 0)} (target <= 1.08x), "
                f"CPU {paired(name, 1)} (target <= 1.4x)"
            )
        print(
            f"  {labels[name]:<24} wall {med(name, 0):6.2f} s, CPU {med(name, 1):5.2f} s "
            f"({peaks[name]} in flight){ratio}"
        )
    if "before" in rows:
        print(
            f"  this tree / {before}, round by round: CPU {paired('runner', 1, 'before')}, "
            f"wall {paired('runner', 0, 'before')}"
        )
    print(f"  waiting alone is {ideal:.2f} s")


def _server_cpu(folder: Path) -> float:
    """What the warm servers in ``folder`` and the applies they forked have spent so far."""
    return sum(s["cpu_seconds"] + s["children_cpu_seconds"] for s in control.statuses(str(folder)))


def pool(root: Path, calls: int, repeat: int) -> None:
    """Section 3b: the image step over a pool of 4 loopback backends, in process. The servers
    run in a process of their own; the CPU each side used is shown, since on a loaded machine
    the servers' share of the cores can set the pace as much as the client's."""
    conc, delay = 16, 0.2
    ideal = math.ceil(calls / conc) * delay
    servers = Servers(4, delay)
    try:
        settings = {"base_urls": [f"{u}/v1" for u in servers.urls], "max_concurrency": 4}
        timings, server_cpu = [], []
        per = [0, 0, 0, 0]
        for k in range(repeat):
            servers.ask("reset")
            provider = create("openai", settings)
            used = servers.cpu()
            timings.append(run_step(root / f"pool{k}", provider, calls, conc, "16x16", f"p{k}"))
            server_cpu.append(servers.cpu() - used)
            per = [max(p, s[0]) for p, s in zip(per, servers.ask("stats"), strict=True)]
    finally:
        servers.close()
    wall = statistics.median(t.wall for t in timings)
    cpu = statistics.median(t.cpu for t in timings)
    print(
        f"image step over a pool of 4 backends x max_concurrency 4, {calls} calls x "
        f"{delay * 1000:.0f} ms, in process, median of {repeat}, load average "
        f"{os.getloadavg()[0]:.1f}: {wall:.2f} s, ideal {ideal:.2f} s, ratio {wall / ideal:.2f} "
        f"(target <= 1.2); most in flight per backend {per}; CPU: runner {cpu:.2f} s, the "
        f"servers {statistics.median(server_cpu):.2f} s"
    )


def llm_overhead(root: Path, calls: int, repeat: int) -> None:
    """Section 4: an llm for_each over the fake at delay 0, in process, per element."""
    from runner.engine.run.apply import apply_file
    from runner.engine.run.options import ApplyOptions
    from runner.providers import TextRequest

    work = root / "overhead"
    work.mkdir()
    (work / "pipeline.yaml").write_text(FAN_OUT.replace("CONCURRENCY", "16"), "utf-8")
    (work / "runner.toml").write_text('[general]\ndefault_provider = "fake"\n', "utf-8")
    fake = create("fake", {})

    async def alone(tag: str) -> None:
        for k in range(calls):
            message = {"role": "user", "content": f"say {tag}-e{k}"}
            await fake.generate_text(TextRequest(messages=[message], idempotency_key=f"{tag}{k}"))

    def applied(tag: str, n: int) -> tuple[float, float]:
        items = json.dumps([f"{tag}-e{k}" for k in range(n)])
        start, cpu = time.perf_counter(), time.process_time()
        report = apply_file(
            work / "pipeline.yaml",
            {"items": items},
            state_dir=work / ".runner",
            options=ApplyOptions(),
        )
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        assert report.exit_code == 0, report
        return wall, used

    applied("warm", calls)  # imports, the journal's creation, the first compile
    fake_alone = []
    for r in range(repeat):
        start = time.perf_counter()
        asyncio.run(alone(f"a{r}"))
        fake_alone.append((time.perf_counter() - start) / calls)
    # Per element: an apply of ``calls`` elements less an apply of none (compile, journal,
    # run records: what a run costs whatever its size), divided by ``calls``.
    runs = []
    for r in range(repeat):
        empty = applied(f"z{r}", 0)
        full = applied(f"r{r}", calls)
        runs.append(((full[0] - empty[0]) / calls, (full[1] - empty[1]) / calls, empty[0]))
    fake_ms = statistics.median(fake_alone) * 1000
    wall = statistics.median(w for w, _, _ in runs) * 1000
    cpu = statistics.median(c for _, c, _ in runs) * 1000
    fixed = statistics.median(e for _, _, e in runs) * 1000
    print(
        f"llm for_each over the fake at delay 0, {calls} elements, concurrency 16, in process, "
        f"median of {repeat} (a run's fixed {fixed:.0f} ms taken out): {wall:.2f} ms per "
        f"element (CPU {cpu:.2f}), fake alone {fake_ms:.3f} ms: engine overhead "
        f"{wall - fake_ms:.2f} ms per call (target <= 1 ms)"
    )


def compare(section: str, before: Path, opts: argparse.Namespace) -> None:
    """An in-process section run from ``before`` and from this tree, in turn, twice: each in a
    process of its own (one interpreter cannot hold both trees)."""
    for _ in range(2):
        for label, tree in (("before", before), ("after ", REPO)):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--only",
                    section,
                    "--calls",
                    str(opts.calls),
                    "--repeat",
                    str(opts.repeat),
                ],
                env={**ENV, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            print(f"{label}: {out.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--size", default="256x256")
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--only",
        choices=["fake", "sockets", "llm", "pool", "overhead"],
        help="one part of the bench (sockets: llm and pool)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another source tree of runner (e.g. a git worktree of the commit before) to "
        "measure side by side with this one",
    )
    parser.add_argument(
        "--httpx-python",
        help="the plain httpx script's interpreter (default: a venv of httpx alone under "
        "~/.cache/runner-bench/httpx, made from PyPI when missing)",
    )
    parser.add_argument(
        "--python",
        help="runner's interpreter in the whole-process llm rows (default: this one; "
        "~/.cache/runner-bench/runner/bin/python is a venv like the peer's, see bench/README.md)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="the llm row also through this tree's warm server (runner/warm), its CPU counted",
    )
    opts = parser.parse_args()
    before = opts.before.resolve() if opts.before else None
    wanted = {
        None: {"overhead", "llm", "pool", "fake"},
        "sockets": {"llm", "pool"},
    }.get(opts.only, {opts.only})
    if "overhead" in wanted:
        if before is not None:
            compare("overhead", before, opts)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                llm_overhead(Path(tmp), opts.calls, opts.repeat)
    if "llm" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            llm_process(
                Path(tmp),
                opts.calls,
                opts.repeat,
                before,
                opts.httpx_python,
                opts.python,
                opts.warm,
            )
    if "pool" in wanted:
        if before is not None:
            compare("pool", before, opts)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                pool(Path(tmp), opts.calls, opts.repeat)
    if "fake" not in wanted:
        return
    w, h = (int(v) for v in opts.size.split("x"))
    runs = iter(range(1_000_000))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def step(delay_ms: int, conc: int) -> Timing:
            settings = {"delay_ms": delay_ms, "max_concurrency": 16}
            n = next(runs)  # a fresh state and prompt: no call is answered by the ledger
            return run_step(
                root / f"s{n}", create("fake", settings), opts.calls, conc, opts.size, f"r{n}"
            )

        print(f"{opts.calls} fake image calls, {opts.size}, delay {opts.delay_ms} ms")
        step(0, 16)  # warm-up: imports, fonts, the worker threads' first start
        for conc, repeat in ((16, opts.repeat), (1, 1)):
            walls = sorted(step(opts.delay_ms, conc).wall for _ in range(repeat))
            ideal = math.ceil(opts.calls / conc) * opts.delay_ms / 1000
            wall = statistics.median(walls)
            spread = f" (min {walls[0]:.2f}, max {walls[-1]:.2f})" if repeat > 1 else ""
            print(
                f"  concurrency {conc:2d}: wall {wall:6.2f} s{spread}, ideal {ideal:6.2f} s, "
                f"ratio {wall / ideal:5.2f}"
            )
        fake = create("fake", {"max_concurrency": 16})
        alone = [provider_only(fake, opts.calls, (w, h)) for _ in range(opts.repeat)]
        draw = statistics.median(a[0] for a in alone)
        draw_cpu = statistics.median(a[1] for a in alone)
        put = durable_put(root, opts.calls)
        print(
            f"  fake alone (draw + encode): {draw * 1000:.2f} ms per call, CPU {draw_cpu * 1000:.2f}"
        )
        print(f"  durable put_bytes on this disk (fsync file + dir): {put * 1000:.2f} ms")
        ms = 1000 / opts.calls
        for conc in (1, 16):
            timings = [step(0, conc) for _ in range(opts.repeat)]
            wall = statistics.median(t.wall for t in timings) * ms
            cpu = statistics.median(t.cpu for t in timings) * ms
            main_cpu = statistics.median(t.main_cpu for t in timings) * ms
            sql = timings[0].statements / opts.calls
            print(
                f"  delay 0, concurrency {conc:2d} (median of {opts.repeat}): {wall:6.2f} ms per "
                f"call, engine overhead {wall - draw * 1000:.2f} ms; CPU {cpu:.2f} ms per call, "
                f"engine CPU {cpu - draw_cpu * 1000:.2f} ms (event loop {main_cpu:.2f}); "
                f"{sql:.1f} SQL statements per call"
            )


if __name__ == "__main__":
    main()
