"""Outputs are never restored, stored or vouched for through a path that now leads out of the
root, and restored files get the permissions a written file gets.

The class: a path that was inside the root when the pipeline compiled and leads out when a file
is written or read, because a directory (or the file itself) became a symlink. Members:
- a cached output restored after an earlier step of the same run swapped its directory;
- the same in a for_each element;
- the no-op fast path vouching for a workspace file reached through a swapped directory;
- a step's declared output read (and stored) through a directory it or an earlier step swapped;
- an output that is itself a symlink pointing out;
- restored files' mode follows the umask (not mkstemp's 0600).
Runs are real `python -m runner apply` processes on real files; a step that swaps a directory
opts out of the sandbox (sandboxed, it could not: test_sandbox.py), as the guarantee here is
runner's own, whatever a step did.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SWAP = 'if [ -e swap-now ]; then rm -rf out && ln -s "$OUTSIDE" out; else mkdir -p out; fi'


def _apply(root: Path, outside: Path, *args: str, umask: int = 0o022) -> dict[str, object]:
    env = {**os.environ, "OUTSIDE": str(outside)}
    res = subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(umask),
        timeout=120,
    )
    doc: dict[str, object] = json.loads(res.stdout) if res.stdout.strip() else {}
    doc["_exit"] = res.returncode
    doc["_stderr"] = res.stderr
    return doc


def _project(tmp_path: Path, pipeline: str) -> tuple[Path, Path]:
    root, outside = tmp_path / "project", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "runner.toml").write_text("")
    (root / "pipeline.yaml").write_text(textwrap.dedent(pipeline))
    return root, outside


SAME_RUN = """\
runner: 1
name: p
steps:
  swap: {uses: shell, cache: false, sandbox: false, with: {run: 'SWAP', pass_env: [OUTSIDE]}}
  make:
    uses: shell
    needs: [swap]
    with: {run: "echo secret-ish > out/x.txt", outputs: [out/x.txt]}
""".replace("SWAP", SWAP)


def test_cached_output_not_restored_through_a_swapped_directory(tmp_path: Path) -> None:
    root, outside = _project(tmp_path, SAME_RUN)
    first = _apply(root, outside)
    assert first["_exit"] == 0, first["_stderr"]
    (root / "swap-now").write_text("")
    second = _apply(root, outside)
    assert second["_exit"] != 0
    assert "outside the root" in json.dumps(second)
    assert list(outside.iterdir()) == []  # nothing was written out there


FOR_EACH = """\
runner: 1
name: p
steps:
  swap: {uses: shell, cache: false, sandbox: false, with: {run: 'SWAP', pass_env: [OUTSIDE]}}
  make:
    uses: shell
    needs: [swap]
    for_each: "${{ [1, 2] }}"
    with: {run: "echo ${{ item }} > out/x${{ item }}.txt", outputs: ["out/x${{ item }}.txt"]}
""".replace("SWAP", SWAP)


def test_for_each_elements_not_restored_through_a_swapped_directory(tmp_path: Path) -> None:
    root, outside = _project(tmp_path, FOR_EACH)
    assert _apply(root, outside)["_exit"] == 0
    (root / "swap-now").write_text("")
    second = _apply(root, outside)
    assert second["_exit"] != 0
    assert list(outside.iterdir()) == []


FRESH = """\
runner: 1
name: p
steps:
  make: {uses: shell, with: {run: "mkdir -p out && echo 1 > out/x.txt", outputs: [out/x.txt]}}
"""


def test_fast_path_does_not_vouch_for_a_swapped_directory(tmp_path: Path) -> None:
    root, outside = _project(tmp_path, FRESH)
    assert _apply(root, outside)["_exit"] == 0
    noop = _apply(root, outside)
    assert noop["_exit"] == 0 and noop["summary"] == {  # type: ignore[comparison-overlap]
        "ran": 0,
        "cached": 1,
        "skipped": 0,
        "failed": 0,
    }
    # the same bytes, now out of the root, reached through the old name
    (outside / "x.txt").write_bytes((root / "out" / "x.txt").read_bytes())
    for f in (root / "out").iterdir():
        f.unlink()
    (root / "out").rmdir()
    (root / "out").symlink_to(outside)
    third = _apply(root, outside)
    assert third["_exit"] != 0, "the fast path vouched for a file outside the root"
    assert "escapes the pipeline root" in str(third["_stderr"]) + json.dumps(third)


STEP_SWAPS = """\
runner: 1
name: p
steps:
  make:
    uses: shell
    sandbox: false  # (sandboxed, it could not swap the directory: test_sandbox.py)
    with:
      run: 'rm -rf out && ln -s "$OUTSIDE" out && echo stolen > out/x.txt'
      outputs: [out/x.txt]
      pass_env: [OUTSIDE]  # a step is given only what it names
"""

LEAF_LINK = """\
runner: 1
name: p
steps:
  make:
    uses: shell
    with:
      run: 'mkdir -p out && echo stolen > "$OUTSIDE/x.txt" && ln -sf "$OUTSIDE/x.txt" out/x.txt'
      outputs: [out/x.txt]
      pass_env: [OUTSIDE]  # a step is given only what it names
"""


@pytest.mark.parametrize("pipeline", [STEP_SWAPS, LEAF_LINK], ids=["dir-swapped", "leaf-link"])
def test_outputs_are_not_read_from_outside_the_root(tmp_path: Path, pipeline: str) -> None:
    root, outside = _project(tmp_path, pipeline)
    doc = _apply(root, outside)
    assert doc["_exit"] != 0
    assert "outside the root" in json.dumps(doc)
    objects = root / ".runner" / "objects"
    stored = [p.read_bytes() for p in objects.rglob("*") if p.is_file()]
    assert b"stolen\n" not in stored


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_restored_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    root, outside = _project(tmp_path, FRESH)
    assert _apply(root, outside, umask=umask)["_exit"] == 0
    written = stat.S_IMODE((root / "out" / "x.txt").stat().st_mode)
    (root / "out" / "x.txt").unlink()
    doc = _apply(root, outside, umask=umask)
    assert doc["_exit"] == 0, doc["_stderr"]
    restored = stat.S_IMODE((root / "out" / "x.txt").stat().st_mode)
    assert restored == written == 0o666 & ~umask
