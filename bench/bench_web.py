"""Web benchmark: the run view of a run with 2,000 steps (4 phases of template steps).

Run: python bench/bench_web.py [STEPS] [--no-browser]
Prints, for the HTML run page and its JSON document: time to first byte and to the whole
body over a real socket (uvicorn on 127.0.0.1), cold (first request: compiles the pipeline)
and warm (median of 5). Then, in headless Chromium via selenium (skipped with a message when
/usr/bin/chromium or /usr/bin/chromedriver is missing):
- the page load: first paint, first contentful paint, domContentLoaded and load event, cold and
  the median of 5 warm loads;
- live progress: with the run marked "running", a writer thread journals 100 StepStarted
  events a second for 10 s (one per step row, each carrying its write time); a MutationObserver
  in the page stamps when each row's status cell changes. Prints the event-to-DOM latency
  (median/p90/max; the SSE endpoint polls the journal every 0.2 s, so ~100 ms is its floor
  on average) and the requestAnimationFrame gaps and long tasks during the stream;
- a thumbnail run of 64 iterations (the shipped pipeline on the fake provider): its page's load
  event, cold and the median of 5 warm loads (64 tiles, their images from the store).
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

PHASES = ("draft", "check", "polish", "ship")
THUMBS = 64


def write_pipeline(directory: Path, steps: int) -> Path:
    """``steps`` template steps over four phases; every tenth one reads the previous one."""
    lines = ["runner: 1", "name: bench-web", f"phases: [{', '.join(PHASES)}]", "steps:"]
    for i in range(steps):
        text = f"Step {i}." + (
            f" After: ${{{{ steps.s{i - 1}.output.text }}}}" if i % 10 == 9 else ""
        )
        phase = PHASES[i * len(PHASES) // steps]
        lines += [
            f"  s{i}:",
            "    uses: template",
            f"    phase: {phase}",
            "    with:",
            f'      text: "{text}"',
        ]
    path = directory / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def timed_get(client: httpx.Client, url: str) -> tuple[float, float, int]:
    """(seconds to the first body byte, seconds to the whole body, bytes)."""
    started = time.perf_counter()
    with client.stream("GET", url) as res:
        res.raise_for_status()
        chunks = res.iter_bytes()
        first = next(chunks, b"")
        ttfb = time.perf_counter() - started
        size = len(first) + sum(len(c) for c in chunks)
    return ttfb, time.perf_counter() - started, size


CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def browser_missing() -> str | None:
    """Why the browser part cannot run here, or None when it can."""
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not tool.exists():
            return f"{tool} is missing"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    return None


def start_browser(profile: Path) -> Any:
    """Headless Chromium as the browser tests start it (tests/webdriving.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.webdriving import chromium

    return chromium(profile)


# Paint entries can land a moment after `load`; wait for first-contentful-paint briefly.
PAINT_JS = """
const done = arguments[arguments.length - 1];
const started = performance.now();
(function poll() {
  const paints = {};
  for (const e of performance.getEntriesByType('paint')) paints[e.name] = e.startTime;
  const nav = performance.getEntriesByType('navigation')[0];
  if ((!('first-contentful-paint' in paints) || nav.loadEventEnd === 0)
      && performance.now() - started < 3000) { setTimeout(poll, 20); return; }
  done({fp: paints['first-paint'] ?? null, fcp: paints['first-contentful-paint'] ?? null,
        ttfb: nav.responseStart, body: nav.responseEnd, interactive: nav.domInteractive,
        dcl: nav.domContentLoadedEventEnd, complete: nav.domComplete,
        load: nav.loadEventEnd, rows: document.querySelectorAll('tr[data-step]').length,
        resources: performance.getEntriesByType('resource').map(
          (r) => [r.name.replace(location.origin, ''), r.startTime, r.responseEnd])});
})();
"""


def thumbnail_run(root: Path, n: int = 64) -> str:
    """A hero thumbnail run of ``n`` iterations in ``root``'s state; its run id."""
    import shutil

    from runner.engine.run.apply import apply_file

    repo = Path(__file__).resolve().parent.parent
    (root / "pipelines").mkdir(exist_ok=True)
    text = (repo / "pipelines" / "thumbnail.yaml").read_text(encoding="utf-8")
    # The shipped pipeline caps n at 32 a run; the page is measured with twice that.
    text = text.replace("minimum: 1, maximum: 32,", f"minimum: 1, maximum: {max(n, 32)},")
    (root / "pipelines" / "thumbnail.yaml").write_text(text, encoding="utf-8")
    shutil.copytree(repo / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    started = time.perf_counter()
    report = apply_file(
        root / "pipelines" / "thumbnail.yaml",
        {"n": str(n), "video_id": "bench64", "concurrency": "8"},
        state_dir=root / ".runner",
    )
    from runner.engine.run.apply import State
    from runner.state.iterations import record_iterations

    state = State.open(root / ".runner")
    try:
        outputs = {o.id: o.output for o in report.steps}
        record_iterations(state.journal, report.run_id, outputs, ["generate"], ["final"])
    finally:
        state.close()
    print(f"thumbnail run of {n} iterations: {time.perf_counter() - started:.1f}s")
    return report.run_id


def page_loads(driver: Any, url: str, loads: int = 5) -> None:
    """Print paint and navigation timings of ``loads`` loads of ``url`` (first one cold)."""
    driver.set_script_timeout(10)
    samples: list[dict[str, float | None]] = []
    for _ in range(loads + 1):
        driver.get(url)
        samples.append(driver.execute_async_script(PAINT_JS))
    cold, warm = samples[0], samples[1:]

    def ms(v: float | None) -> str:
        return "   n/a" if v is None else f"{v:6.0f}"

    keys = ("ttfb", "body", "fp", "fcp", "interactive", "dcl", "complete", "load")
    print("browser page load (ms since navigation start):")
    labels = {"interactive": "interac", "complete": "complet"}
    print("        " + "".join(f"{labels.get(k, k):>8}" for k in keys) + "    rows")
    print("cold    " + "".join(f"  {ms(cold[k])}" for k in keys) + f"  {cold['rows']:>6}")
    med: dict[str, float | None] = {}
    for k in keys:
        vals = [float(s[k]) for s in warm if s[k] is not None]  # type: ignore[arg-type]
        med[k] = statistics.median(vals) if vals else None
    print(f"warm x{loads}" + "".join(f"  {ms(med[k])}" for k in keys) + f"  {warm[-1]['rows']:>6}")
    fetched = warm[-1]["resources"]
    for name, begun, ended in fetched[:4]:  # type: ignore[index]
        print(f"  last load fetched {name}: {begun:.0f} -> {ended:.0f} ms")
    if len(fetched) > 4:  # type: ignore[arg-type]
        print(f"  ... and {len(fetched) - 4} more resources")  # type: ignore[arg-type]
    verdict = "PASS" if (med["load"] or 1e9) < 1000 else "FAIL"
    print(f"target: run view loads in under 1 s (warm median load event): {verdict}")


# A MutationObserver stamps the wall-clock time at which each step row's status cell changes;
# a requestAnimationFrame loop and a long-task observer measure whether the page stays fluid.
INSTRUMENT_JS = """
const table = document.getElementById('run-page');  // one table per phase
window.__bench = {marks: {}, gaps: [], lastFrame: null, longTasks: [], measuring: false};
const b = window.__bench;
new MutationObserver((records) => {
  const t = performance.timeOrigin + performance.now();
  for (const r of records) {
    if (!r.target.classList || !r.target.classList.contains('st')) continue;
    const row = r.target.closest('tr[data-step]');
    const text = r.target.textContent;
    if (row && text && !(row.dataset.step in b.marks)) b.marks[row.dataset.step] = [text, t];
  }
}).observe(table, {childList: true, subtree: true});
function frame(ts) {
  if (b.measuring && b.lastFrame !== null) b.gaps.push(ts - b.lastFrame);
  b.lastFrame = ts;
  requestAnimationFrame(frame);
}
requestAnimationFrame(frame);
try {
  new PerformanceObserver((list) => {
    if (b.measuring) for (const e of list.getEntries()) b.longTasks.push(e.duration);
  }).observe({type: 'longtask'});
} catch (e) { /* no long-task support: the frame gaps still tell */ }
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stream_latency(
    driver: Any,
    url: str,
    state_dir: Path,
    run_id: str,
    steps: int,
    rate: float = 100.0,
    seconds: float = 10.0,
) -> None:
    """Event-to-DOM latency with StepStarted events written at ``rate``/s for ``seconds``."""
    from runner.state.journal import Journal

    journal = Journal.open(state_dir)
    old_status = journal.get_run(run_id)["status"]
    journal.update_run(run_id, status="running")  # the page follows only a running run
    try:
        driver.get(url)
        status = driver.execute_script("return document.getElementById('run-page').dataset.status")
        assert status == "running", status
        driver.execute_script(INSTRUMENT_JS)

        def write(step: str) -> float:
            wrote_ms = time.time() * 1000
            data = json.dumps({"attempt": 1, "bench_wrote_ms": wrote_ms})
            journal.add_events([(run_id, wrote_ms / 1000, "StepStarted", step, None, data)])
            return wrote_ms

        def shown(step: str) -> bool:
            return bool(driver.execute_script("return arguments[0] in __bench.marks", step))

        # Warm-up: one event, so the SSE stream is connected before the clock starts.
        write("s0")
        deadline = time.monotonic() + 10
        while not shown("s0"):
            if time.monotonic() > deadline:
                raise RuntimeError("the warm-up event never reached the page")
            time.sleep(0.02)
        driver.execute_script("__bench.gaps = []; __bench.measuring = true;")

        count = min(int(rate * seconds), steps - 1)
        written: dict[str, float] = {}

        def writer() -> None:
            # A journal connection of its own, like an engine in another process.
            own = Journal.open(state_dir)
            try:
                t0 = time.monotonic()
                for i in range(1, count + 1):
                    pause = t0 + i / rate - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    wrote_ms = time.time() * 1000
                    data = json.dumps({"attempt": 1, "bench_wrote_ms": wrote_ms})
                    own.add_events([(run_id, wrote_ms / 1000, "StepStarted", f"s{i}", None, data)])
                    written[f"s{i}"] = wrote_ms
            finally:
                own.close()

        started = time.monotonic()
        thread = threading.Thread(target=writer)
        thread.start()
        # Round trips into the page during the stream: a busy main thread would delay them.
        probes: list[float] = []
        while thread.is_alive():
            t = time.perf_counter()
            driver.execute_script("return 1")
            probes.append((time.perf_counter() - t) * 1000)
            time.sleep(0.25)
        thread.join()
        wrote_for = time.monotonic() - started
        deadline = time.monotonic() + 5
        marks: dict[str, list[Any]] = {}
        while time.monotonic() < deadline:
            marks = driver.execute_script("return __bench.marks")
            if all(step in marks for step in written):
                break
            time.sleep(0.05)
        bench = driver.execute_script(
            "__bench.measuring = false;return {gaps: __bench.gaps, longTasks: __bench.longTasks};"
        )
    finally:
        journal.update_run(run_id, status=old_status)
        journal.close()

    latencies = [marks[s][1] - w for s, w in written.items() if s in marks]
    wrong = [s for s, w in written.items() if s in marks and marks[s][0] != "running"]
    missing = [s for s in written if s not in marks]
    if missing:
        print(f"not shown: {len(missing)}, e.g. {', '.join(missing[:8])}")
    print(
        f"stream: {len(written)} StepStarted events in {wrote_for:.1f} s "
        f"({len(written) / wrote_for:.0f}/s); {len(latencies)} reached the DOM, "
        f"{len(wrong)} with an unexpected status"
    )
    if latencies:
        print(
            f"event-to-DOM latency (ms): median {statistics.median(latencies):.0f}, "
            f"p90 {pct(latencies, 0.9):.0f}, max {max(latencies):.0f}, "
            f"min {min(latencies):.0f}"
        )
    gaps: list[float] = bench["gaps"]
    long_tasks: list[float] = bench["longTasks"]
    if gaps:
        print(
            f"frames during the stream: {len(gaps)}, rAF gap median "
            f"{statistics.median(gaps):.1f} ms, p99 {pct(gaps, 0.99):.1f} ms, "
            f"max {max(gaps):.1f} ms"
        )
    print(
        f"long tasks (>50 ms): {len(long_tasks)}"
        + (f", longest {max(long_tasks):.0f} ms" if long_tasks else "")
        + f"; script round trips during the stream: median "
        f"{statistics.median(probes) if probes else 0:.1f} ms, max {max(probes, default=0):.1f} ms"
    )
    responsive = bool(gaps) and max(gaps) < 100 and len(latencies) == len(written)
    print(
        "target: stays responsive at 100 events/s (every event shown, no frame gap >= 100 ms): "
        + ("PASS" if responsive else "FAIL")
    )


def main() -> None:
    import uvicorn

    from runner.engine.run.apply import apply_file
    from runner.engine.run.options import ApplyOptions
    from runner.surfaces.web.app import create_app

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 2000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = write_pipeline(root, steps)
        started = time.perf_counter()
        report = apply_file(path, state_dir=root / ".runner", options=ApplyOptions(jobs=4))
        print(
            f"apply of {steps} steps: {time.perf_counter() - started:.1f}s ({report.status.value})"
        )
        thumbs_run = thumbnail_run(root, THUMBS)
        port = free_port()
        app = create_app(root / ".runner", "bench", cwd=root)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        base = f"http://127.0.0.1:{port}"
        try:
            # The server needs its session token (as `runner serve` prints it); pages included.
            with httpx.Client(timeout=60, headers={"X-Runner-Token": "bench"}) as client:
                for label, url in (
                    ("page", f"/runs/{report.run_id}"),
                    ("json", f"/api/runs/{report.run_id}"),
                ):
                    cold = timed_get(client, base + url)
                    warm = [timed_get(client, base + url) for _ in range(5)]
                    print(
                        f"{label:<5} cold: ttfb {cold[0] * 1000:7.1f} ms, "
                        f"total {cold[1] * 1000:7.1f} ms, {cold[2] / 1024:7.0f} KiB"
                    )
                    ttfb = statistics.median(w[0] for w in warm) * 1000
                    total = statistics.median(w[1] for w in warm) * 1000
                    print(f"{label:<5} warm: ttfb {ttfb:7.1f} ms, total {total:7.1f} ms")
            missing = browser_missing()
            if "--no-browser" in sys.argv:
                print("browser: skipped (--no-browser)")
            elif missing:
                print(f"browser: skipped, {missing} (needs headless Chromium and chromedriver)")
            else:
                url = f"{base}/runs/{report.run_id}"
                driver = start_browser(root / "profile")
                from runner.surfaces.web.security import login_url

                driver.get(login_url(f"{base}/", "bench"))  # the session cookie, as a user gets it
                try:
                    page_loads(driver, url)
                    stream_latency(driver, url, root / ".runner", report.run_id, steps)
                    print(f"-- the page of a {THUMBS}-iteration thumbnail run --")
                    page_loads(driver, f"{base}/runs/{thumbs_run}")
                finally:
                    driver.quit()
        finally:
            server.should_exit = True
            thread.join(10)


if __name__ == "__main__":
    main()
