"""Benchmark: finalise a 1536x1024 generated image to a compliant 1280x720 JPEG with a title.

Prints the median time per image over ``--runs`` runs, then throughput with 2 worker threads
and with 2 worker processes (Pillow releases the GIL while resampling and encoding, so threads
should scale on 2 cores too).

    /work/venv/bin/python bench/bench_finalize.py [--runs 20] [--batch 20]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

from PIL import Image, ImageDraw, ImageFilter

from runner.steps.imaging.finalize import finalize
from runner.steps.imaging.profiles import load_profile

TITLE = "We tried every thumbnail trick so you don't have to"


def source_image() -> bytes:
    """A PNG like a model's output: smooth gradients, shapes and some grain."""
    size = (1536, 1024)
    img = Image.linear_gradient("L").resize(size).convert("RGB")
    draw = ImageDraw.Draw(img)
    draw.ellipse((300, 150, 1250, 950), fill=(210, 80, 50))
    draw.rectangle((80, 600, 600, 980), fill=(40, 120, 200))
    rng = random.Random(11)
    grain = Image.frombytes("L", size, rng.randbytes(size[0] * size[1]))
    grain = grain.filter(ImageFilter.GaussianBlur(1)).convert("RGB")
    img = Image.blend(img, grain, 0.15)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def finalize_once(raw: bytes) -> int:
    fin = finalize(raw, load_profile("youtube"), title=TITLE, fmt="jpeg")
    if not fin.compliant or (fin.width, fin.height) != (1280, 720):
        raise SystemExit(f"not compliant: {fin.report.reason}")
    return fin.bytes_len


def throughput(make: Callable[[], Executor], raw: bytes, batch: int) -> float:
    with make() as pool:
        list(pool.map(finalize_once, [raw] * 2))  # warm the workers
        t0 = time.perf_counter()
        list(pool.map(finalize_once, [raw] * batch))
        return batch / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=20)
    opts = parser.parse_args()

    raw = source_image()
    size = finalize_once(raw)  # warm-up (font loading, first encode)
    times = []
    for _ in range(opts.runs):
        t0 = time.perf_counter()
        finalize_once(raw)
        times.append(time.perf_counter() - t0)
    times.sort()
    p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
    print(f"source: 1536x1024 PNG, {len(raw)} bytes -> final 1280x720 JPEG, {size} bytes")
    print(
        f"single: median {statistics.median(times) * 1000:.1f} ms, "
        f"p90 {p90 * 1000:.1f} ms, min {times[0] * 1000:.1f} ms over {opts.runs} runs"
    )
    serial = 1 / statistics.median(times)
    threads = throughput(lambda: ThreadPoolExecutor(2), raw, opts.batch)
    procs = throughput(lambda: ProcessPoolExecutor(2), raw, opts.batch)
    print(
        f"throughput: serial {serial:.1f}/s, 2 threads {threads:.1f}/s "
        f"({threads / serial:.2f}x), 2 processes {procs:.1f}/s ({procs / serial:.2f}x)"
    )


if __name__ == "__main__":
    main()
