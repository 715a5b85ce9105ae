"""A shell step's declared output must name a file: one that names a folder is refused before
anything runs, at the step's place, whether the folder is found by a stat (a few outputs in
its directory) or by the one listing of a directory many outputs are in (a fan-out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.engine.run.preflight import check_plan
from runner.errors import InvalidPipeline
from runner.pipeline.compiler import compile_pipeline


def _fan(root: Path, n: int, folder: int) -> Path:
    steps = "".join(
        f"  s{i:02d}:\n    uses: shell\n"
        f"    with: {{run: 'echo {i} > out/{i:02d}.txt', outputs: [out/{i:02d}.txt]}}\n"
        for i in range(n)
    )
    (root / "out").mkdir()
    (root / "out" / f"{folder:02d}.txt").mkdir()  # made a folder, by hand or by a bug
    path = root / "pipeline.yaml"
    path.write_text(f"runner: 1\nname: fan\nsteps:\n{steps}")
    return path


@pytest.mark.parametrize("folder", [0, 3, 25, 39])  # asked by a stat, and after the listing
def test_an_output_that_is_a_folder_is_refused_at_its_step(tmp_path: Path, folder: int) -> None:
    plan = compile_pipeline(_fan(tmp_path, 40, folder))
    with pytest.raises(InvalidPipeline, match=f"output 'out/{folder:02d}.txt' is a folder") as e:
        check_plan(plan, state_dir=tmp_path / ".runner")
    assert e.value.where is not None and e.value.where.line == 4 + 3 * folder


def test_outputs_that_are_files_or_missing_pass(tmp_path: Path) -> None:
    path = _fan(tmp_path, 40, 99)
    (tmp_path / "out" / "07.txt").write_text("made before")
    check_plan(compile_pipeline(path), state_dir=tmp_path / ".runner")
