"""`runner init` never writes through a symlink inside the project it sets up (issue 40)."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from runner.surfaces.cli.app import cli


def _init(directory: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["init", str(directory)])
    return result.exit_code, result.output


def test_a_symlinked_gitignore_is_refused_and_the_file_outside_is_untouched(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".gitignore").symlink_to(outside)
    code, output = _init(project)
    assert code == 2, output
    assert ".gitignore is a symlink" in output
    assert outside.read_text() == "precious\n"


def test_a_dangling_pipeline_link_is_refused_and_nothing_is_created_outside(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    target = tmp_path / "elsewhere" / "made.yaml"
    target.parent.mkdir()
    (project / "pipeline.yaml").symlink_to(target)
    code, output = _init(project)
    assert code == 2, output
    assert "pipeline.yaml is a symlink" in output
    assert not target.exists()


def test_a_symlinked_prompts_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "prompts").symlink_to(elsewhere)
    code, output = _init(project)
    assert code == 2, output
    assert "prompts is a symlink" in output
    assert os.listdir(elsewhere) == []


def test_a_plain_init_still_writes_every_file_and_a_second_keeps_them(tmp_path: Path) -> None:
    project = tmp_path / "project"
    code, output = _init(project)
    assert code == 0, output
    assert (project / ".gitignore").read_text() == ".runner/\nexports/\n"
    assert (project / "prompts" / "hello.j2").is_file()
    (project / "pipeline.yaml").write_text("mine\n")
    code, output = _init(project)
    assert code == 0, output
    assert (project / "pipeline.yaml").read_text() == "mine\n"
    assert (project / ".gitignore").read_text() == ".runner/\nexports/\n"
