"""runner.source.paths: check_inside (what validating a step asks) refuses exactly what
inside refuses, with the same message, and builds no Path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.errors import InvalidPipeline, Location
from runner.source.paths import check_inside, forget, inside

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


def test_real_below_equals_realpath_of_the_joined_path(tmp_path: Path) -> None:
    """inside_now's walk of only the relative part gives what realpath of the whole path does,
    whatever lies on the way: links in and out of the root, relative and dangling links, a
    loop, "..", ".", empty components, missing names, a file used as a directory."""
    from itertools import product

    from runner.source.paths import real_below

    base = tmp_path / "root"
    (base / "out/sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (base / "out/a.txt").write_text("a")
    (base / "out/in").symlink_to(base / "out/sub")
    (base / "out/rel").symlink_to("sub/../a.txt")
    (base / "away").symlink_to(tmp_path / "elsewhere")
    (base / "dangling").symlink_to(tmp_path / "nowhere")
    (base / "loop").symlink_to("loop")
    real = os.path.realpath(base)
    names = ["out", "sub", "a.txt", "in", "rel", "away", "dangling", "loop", "..", ".", "", "x"]
    checked = 0
    for n in (1, 2, 3):
        for parts in product(names, repeat=n):
            rel = "/".join(parts)
            assert real_below(real, rel) == os.path.realpath(os.path.join(real, rel)), rel
            checked += 1
    assert real_below(real, "/etc") == os.path.realpath("/etc")
    assert real_below("/", "tmp") == os.path.realpath("/tmp")
    assert checked == 12 + 144 + 1728


def test_a_directory_many_paths_name_refuses_its_symlinks_as_one_path_alone(root: Path) -> None:
    """Past a few names, a directory's symlinks come from one listing of it, not an lstat a
    name: a link pointing out is refused the same, wherever it stands among the names, and a
    directory that cannot be listed (no read permission) is asked name by name."""
    many = root / "many"
    many.mkdir()
    os.symlink(root.parent / "outside" / "f", many / "z_out")
    os.symlink(root / "src" / "in.txt", many / "z_in")
    names = [f"many/f{i:03d}.txt" for i in range(40)]
    for rel in names:
        check_inside(root, rel, where=WHERE)
    with pytest.raises(InvalidPipeline) as checked:
        check_inside(root, "many/z_out", where=WHERE)
    with pytest.raises(InvalidPipeline) as resolved:
        inside(root, "many/z_out", where=WHERE)
    assert str(checked.value) == str(resolved.value)
    check_inside(root, "many/z_in", where=WHERE)  # a link that stays inside is fine
    forget()
    os.chmod(many, 0o300)  # may be walked through, not listed
    try:
        for rel in names:
            check_inside(root, rel, where=WHERE)
        with pytest.raises(InvalidPipeline):
            check_inside(root, "many/z_out", where=WHERE)
    finally:
        os.chmod(many, 0o700)


@pytest.mark.parametrize("rel", GOOD + BAD)
def test_inside_root_answers_as_inside_text(root: Path, rel: str) -> None:
    """InsideRoot (a check of many paths below one root) gives inside_text's answer, or its
    refusal with the same message."""
    from runner.source.paths import InsideRoot, inside_text

    try:
        expected: str | None = inside_text(root, rel, where=WHERE)
    except InvalidPipeline as exc:
        expected = None
        with pytest.raises(InvalidPipeline) as refused:
            InsideRoot(root).text(rel, where=WHERE)
        assert str(refused.value) == str(exc) and refused.value.where == WHERE
    if expected is not None:
        assert InsideRoot(root).text(rel, where=WHERE) == expected
