"""Benchmark: the remote cache over a real S3-protocol server (moto_server on 127.0.0.1).

1. A 1,000-element for_each of shell steps (each writes one file, so each result names one
   object), fully cached in the remote, applied from an empty clone: seconds per element over
   the same apply answered from the local journal (the apply re-run in the clone that made it,
   with the no-op fast path off so every element is looked up), and requests per element made
   to the remote (record reads are batched: one call per turn of the event loop, which s3fs
   sends as concurrent GETs; object fetches run in worker threads in parallel).
2. Pushing: the thumbnail pipeline (4 images, finalised) on the fake provider, a whole
   ``runner apply`` process with push on apply against the same run with no remote: the added
   wall time (target < 10%). Median of ``--repeat`` runs each, interleaved.

Every runner process runs with its bytecode cached (this machine sets PYTHONDONTWRITEBYTECODE).

    .venv/bin/python bench/bench_remote.py [--n 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' S3 server helper
from bench._common import ENV, REPO, apply, compile_tree
from tests.state.remote.s3server import S3Server, s3_server


def _apply(
    root: Path, s3: S3Server, *extra: str, file: str = "pipeline.yaml"
) -> tuple[float, dict]:
    return apply(root, *extra, file=file, env=s3.env(), timeout=1200)


def _foreach_project(root: Path, n: int, remote: str) -> None:
    root.mkdir(parents=True)
    (root / "runner.toml").write_text(f'[cache]\nremote = "{remote}"\nwritable = true\n')
    (root / "pipeline.yaml").write_text(
        textwrap.dedent(
            f"""\
            runner: 1
            name: fan
            steps:
              each:
                uses: shell
                for_each: {list(range(n))}
                with:
                  run: "echo element ${{{{ item }}}} > out/e${{{{ item }}}}.txt"
                  outputs: ["out/e${{{{ item }}}}.txt"]
            """
        )
    )


def _requests(doc: dict) -> int:
    return int((doc.get("remote") or {}).get("requests", 0))


def bench_foreach(s3: S3Server, n: int, tmp: Path) -> None:
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/team"
    a, b = tmp / "fe-a", tmp / "fe-b"
    _foreach_project(a, n, remote)
    _foreach_project(b, n, remote)
    cold, _ = _apply(a, s3)
    local, _ = _apply(a, s3, "--events", os.devnull)  # no fast path: every lookup
    t_remote, doc_remote = _apply(b, s3)
    assert doc_remote["summary"]["cached"] == 1, doc_remote["summary"]
    requests = _requests(doc_remote)
    peer = _peer_fetch(s3, bucket)
    print(f"\n1. for_each of {n} shell steps, fully cached in the remote (moto S3 on loopback)")
    print(f"   cold run that pushed everything : {cold:7.2f} s")
    print(
        f"   apply from the local journal    : {local:7.2f} s  ({local / n * 1e3:.2f} ms/element)"
    )
    print(
        f"   apply from the remote, new clone: {t_remote:7.2f} s  ({t_remote / n * 1e3:.2f} ms/element)"
    )
    print(f"   remote over local               : {(t_remote - local) / n * 1e3:7.2f} ms/element")
    print(
        f"   peer: s3fs cat of the same keys : {peer:7.2f} s  (every record and object, 32 at a time)"
    )
    print(f"   runner over the peer            : {(t_remote - peer) / n * 1e3:7.2f} ms/element")
    if requests:
        print(f"   batched calls to the remote     : {requests} ({requests / n:.3f} per element)")
    # The same apply from a file:// remote: no server between runner and the bytes, so what is
    # left over the local case is runner's own work (fetch, verify, store durably, restore).
    fa, fb = tmp / "fe-file-a", tmp / "fe-file-b"
    file_remote = f"file://{tmp / 'file-remote'}"
    _foreach_project(fa, n, file_remote)
    _foreach_project(fb, n, file_remote)
    _apply(fa, s3)
    t_file, doc_file = _apply(fb, s3)
    assert doc_file["summary"]["cached"] == 1, doc_file["summary"]
    print(
        f"   apply from a file:// remote     : {t_file:7.2f} s  "
        f"({(t_file - local) / n * 1e3:.2f} ms/element over local: runner's own work)"
    )


def _peer_fetch(s3: S3Server, bucket: str) -> float:
    """What any client pays to read every record and object of the remote once (a plain
    s3fs script in a fresh process, with its imports)."""
    script = textwrap.dedent(
        f"""
        import s3fs
        fs = s3fs.S3FileSystem(client_kwargs={{"endpoint_url": "{s3.endpoint}"}})
        keys = fs.find("{bucket}/team")
        data = fs.cat(keys)
        assert len(data) == len(keys)
        """
    )
    env = {**ENV, **s3.env()}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=1200)
    return time.perf_counter() - t0


def _thumb_project(root: Path, remote: str | None, *, writable: bool = True) -> None:
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    text = '[general]\ndefault_provider = "fake"\n'
    if remote:
        flag = "true" if writable else "false"
        text += f'\n[cache]\nremote = "{remote}"\nwritable = {flag}\npush = "apply"\n'
    (root / "runner.toml").write_text(text)


def bench_push(s3: S3Server, repeat: int, tmp: Path) -> None:
    kinds = ("no remote", "remote, read-only", "remote, push on apply")
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(repeat):
        for kind in kinds:
            remote = None if kind == "no remote" else f"s3://{s3.new_bucket()}/team"
            root = tmp / f"th-{i}-{kinds.index(kind)}"
            _thumb_project(root, remote, writable=kind.endswith("apply"))
            wall, doc = _apply(
                root, s3, "-p", f"video_id=bench{i}", file="pipelines/thumbnail.yaml"
            )
            assert doc["exit_code"] == 0
            walls[kind].append(wall)
    med = {k: statistics.median(v) for k, v in walls.items()}
    print("\n2. thumbnail run (fake provider, 4 images), whole process, median of", repeat)
    for k in kinds:
        print(f"   {k:<22}: {med[k]:6.2f} s   {[round(x, 2) for x in walls[k]]}")
    base, reads, push = med["no remote"], med["remote, read-only"], med["remote, push on apply"]
    print(f"   look-ups (misses) add : {(reads - base) / base * 100:+6.1f} %  over no remote")
    print(
        f"   pushing adds          : {(push - reads) / reads * 100:+6.1f} %  over the same run not pushing (target < 10%)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    compile_tree()
    with tempfile.TemporaryDirectory() as d, s3_server() as s3:
        bench_foreach(s3, args.n, Path(d))
        bench_push(s3, args.repeat, Path(d))


if __name__ == "__main__":
    main()
