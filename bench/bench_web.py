"""Web benchmark: the run view of a run with 2,000 steps (4 phases of template steps).

Run: python bench/bench_web.py [STEPS] [--browser]
Prints, for the HTML run page and its JSON document: time to first byte and to the whole
body over a real socket (uvicorn on 127.0.0.1), cold (first request: compiles the pipeline)
and warm (median of 5); with --browser, also Chromium's page load (domContentLoaded, load).
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

PHASES = ("draft", "check", "polish", "ship")


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


def browser_load(url: str, profile: Path) -> tuple[float, float, int]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        timing = driver.execute_script(
            "const t = performance.getEntriesByType('navigation')[0];"
            "return [t.domContentLoadedEventEnd, t.loadEventEnd, t.responseStart, t.responseEnd];"
        )
        rows = driver.execute_script("return document.querySelectorAll('tr[data-step]').length")
        print(f"browser: first byte {timing[2]:.0f} ms, last byte {timing[3]:.0f} ms")
        return timing[0] / 1000, timing[1] / 1000, int(rows)
    finally:
        driver.quit()


def main() -> None:
    import uvicorn

    from runner.engine.apply import apply_file
    from runner.engine.interpreter import ApplyOptions
    from runner.web.app import create_app

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
            with httpx.Client(timeout=60) as client:
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
            if "--browser" in sys.argv:
                dcl, load, rows = browser_load(f"{base}/runs/{report.run_id}", root / "profile")
                print(
                    f"browser: domContentLoaded {dcl * 1000:.0f} ms, load {load * 1000:.0f} ms, "
                    f"{rows} step rows"
                )
        finally:
            server.should_exit = True
            thread.join(10)


if __name__ == "__main__":
    main()
