"""A directory that becomes a symlink pointing out of the root is refused at the next compile,
even in a process (watch, serve) that resolved paths under it before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.errors import InvalidPipeline
from runner.pipeline.compiler import compile_pipeline

PIPELINE = """\
runner: 1
name: p
steps:
  a: {uses: shell, with: {run: "true", inputs: [data/x.txt], outputs: [data/y.txt]}}
"""


def test_a_directory_swapped_for_an_outward_symlink_is_refused_next_compile(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "project", tmp_path / "outside"
    (root / "data").mkdir(parents=True)
    outside.mkdir()
    (root / "data" / "x.txt").write_text("x")
    (root / "pipeline.yaml").write_text(PIPELINE)
    compile_pipeline(root / "pipeline.yaml")  # resolves data/x.txt and data/y.txt

    (root / "data" / "x.txt").unlink()
    (root / "data").rmdir()
    os.symlink(outside, root / "data")
    (outside / "x.txt").write_text("x")
    with pytest.raises(InvalidPipeline, match="escapes the pipeline root"):
        compile_pipeline(root / "pipeline.yaml")
