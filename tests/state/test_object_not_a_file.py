"""Something other than a regular file where an object should be (issue 33, item 6).

A directory at an object's path made apply exit 1 leaving its run `running`, and `--force`
failed with an internal IsADirectoryError; a FIFO would block every read. Whatever is there (a
directory, a FIFO, a symlink, a file where the fan-out directory should be) is damage: set
aside, the object counts as missing, and the run makes it again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Project, runner_bin
from tests.review.test_thumbnail import apply as thumb_apply
from tests.review.test_thumbnail import cli as thumb_cli
from tests.review.test_thumbnail import thumbs  # noqa: F401  # the fixture

PIPELINE = """\
runner: 1
name: six
steps:
  a:
    uses: llm
    with: {prompt: "hello"}
    check: ["${{ output.text | length > 0 }}"]
  b:
    uses: shell
    with: {run: "echo ${{ steps.a.output.text }} | wc -c"}
"""


def _runner(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    # A real process, bounded: an object read that blocks (a FIFO) must fail this, not hang it.
    return subprocess.run(
        [*runner_bin(), *args], cwd=project.root, capture_output=True, text=True, timeout=60
    )


def _replace(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        other = path.parent.parent.parent / "elsewhere"
        other.write_text("not the object")
        path.symlink_to(other)
    elif kind == "fan-out is a file":
        shutil.rmtree(path.parent)
        path.parent.write_text("x")


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "fan-out is a file"])
def test_apply_and_force_survive_a_non_file_object(project: Project, kind: str) -> None:
    project.write("pipeline.yaml", PIPELINE)
    first = _runner(project, "apply", "pipeline.yaml", "--json")
    assert first.returncode == 0, first.stderr
    objects = project.root / ".runner" / "objects"
    (obj,) = [p for p in objects.glob("??/*") if not p.name.startswith(".")]
    _replace(obj, kind)

    again = _runner(project, "apply", "pipeline.yaml", "--json")
    runs = _runner(project, "runs", "list", "--json", "--state", ".runner")
    statuses = [r["status"] for r in json.loads(runs.stdout)["runs"]]
    assert "running" not in statuses, (statuses, again.stderr)
    assert "IsADirectoryError" not in again.stderr and "Traceback" not in again.stderr
    if kind == "fan-out is a file":  # nowhere to write it: the step fails, the run ends
        assert again.returncode != 0 and "cannot write object" in again.stderr + again.stdout
        assert statuses[0] == "failed"
        return
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["run"]["status"] == "completed"
    assert obj.is_file() and not obj.is_symlink()  # made again: the ledger holds the reply
    assert any((objects / ".damaged").iterdir())  # what was there is kept for a look

    _replace(obj, kind)
    forced = _runner(project, "apply", "pipeline.yaml", "--force", "a", "--json")
    assert forced.returncode == 0, forced.stderr
    assert "internal error" not in forced.stderr + forced.stdout
    verify = _runner(project, "verify", "--json", "--state", ".runner")
    assert json.loads(verify.stdout)["ok"] is True, verify.stdout


def test_export_of_the_original_run_after_a_repair(thumbs: Project, tmp_path: Path) -> None:  # noqa: F811
    first = thumb_apply(thumbs)
    assert first["_exit"] == 0
    shutil.rmtree(thumbs.root / ".runner" / "objects")
    before = thumb_cli(thumbs, "export", first["run"]["id"], "--to", str(tmp_path / "none"))
    assert before.exit_code != 0
    assert thumb_cli(thumbs, "verify", "--repair", "--yes", "--json").exit_code == 0
    lost = thumb_cli(thumbs, "export", first["run"]["id"], "--to", str(tmp_path / "lost"))
    assert lost.exit_code == 2 and "were lost" in lost.stderr and "runner apply" in lost.stderr
    assert thumb_apply(thumbs)["_exit"] == 0  # makes the same images again
    out = thumb_cli(thumbs, "export", first["run"]["id"], "--to", str(tmp_path / "out"), "--json")
    assert out.exit_code == 0, out.stderr
    assert len(out.json["files"]) == 4
    shown = thumb_cli(thumbs, "runs", "show", first["run"]["id"], "--json")
    assert shown.exit_code == 0
