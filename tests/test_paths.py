"""runner.pipeline.paths: check_inside (what validating a step asks) refuses exactly what
inside refuses, with the same message, and builds no Path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.errors import InvalidPipeline, Location
from runner.pipeline.paths import check_inside, forget, inside

WHERE = Location("p.yaml", 3, 7)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "src").mkdir(parents=True)
    (tmp_path / "root" / "src" / "in.txt").write_text("x")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "root" / "out_link")
    os.symlink(tmp_path / "outside" / "f", tmp_path / "root" / "src" / "leaf_link")
    os.symlink(tmp_path / "root" / "src", tmp_path / "root" / "in_link")
    forget()
    return tmp_path / "root"


GOOD = ["src/in.txt", "src", ".", "new/file.txt", "src/../src/in.txt", "src//in.txt", "in_link/x"]
BAD = ["", "/etc/passwd", "../x", "src/../../x", "out_link/f", "src/leaf_link", "a\x00b", "\udcff"]


@pytest.mark.parametrize("rel", GOOD)
def test_what_inside_resolves_check_inside_accepts(root: Path, rel: str) -> None:
    assert check_inside(root, rel, where=WHERE) is None
    path = inside(root, rel, where=WHERE)
    assert path == Path(os.path.realpath(root / rel))
    forget()
    assert check_inside(root, rel, where=WHERE) is None  # the checked answer, no Path, first
    assert inside(root, rel, where=WHERE) == path


@pytest.mark.parametrize("rel", BAD)
def test_what_inside_refuses_check_inside_refuses_alike(root: Path, rel: str) -> None:
    with pytest.raises(InvalidPipeline) as checked:
        check_inside(root, rel, where=WHERE)
    with pytest.raises(InvalidPipeline) as resolved:
        inside(root, rel, where=WHERE)
    assert str(checked.value) == str(resolved.value)
    assert checked.value.where == WHERE
