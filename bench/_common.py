"""What the whole-process benches share: an environment with bytecode caching on (this machine
sets PYTHONDONTWRITEBYTECODE), compiling a source tree once, and timing one `runner apply`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "RUNNER_STATE")}
ENV["RUNNER_SERVER"] = "0"  # each process does its own work (see bench_core.ENV)


def compile_tree(tree: Path | None = None) -> None:
    """Byte-compile runner's package (this checkout's, or the one under ``tree``)."""
    import compileall

    if tree is None:
        import runner

        compileall.compile_dir(str(Path(runner.__file__).parent), quiet=1)
    else:
        compileall.compile_dir(str(tree / "runner"), quiet=1)


def apply(
    root: Path,
    *extra: str,
    file: str = "pipeline.yaml",
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> tuple[float, dict[str, Any]]:
    """One ``runner apply FILE --json -q`` in ``root``: (wall seconds, its JSON document).
    A failed apply ends the bench with its stderr."""
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "runner", "apply", file, "--json", "-q", *extra],
        cwd=root,
        env={**ENV, "NO_COLOR": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"apply failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return wall, json.loads(res.stdout)
