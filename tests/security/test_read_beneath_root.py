"""A file a step reads is opened beneath the root as the disk is when it is read, not as it was
when the pipeline compiled (issue 40).

The class: a path checked at compile time (``source.paths.inside``, remembered until the next
compile) and opened later, after an earlier step of the same run replaced a directory on it
with a symlink pointing out. Members: the `read` step's body, a step's input hashed for its
key, a `template` step's template (rendered and hashed), a glob's matches. Each is refused and
nothing of the outside file reaches the journal or the store. Runs are real
`python -m runner apply` processes on real files. The swapping step opts out of the sandbox
(sandboxed, it could not touch the directory: test_sandbox.py): runner's own reads hold
whatever a step did.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MARK = "TOPSECRET-OUTSIDE-MARK"


def _project(tmp_path: Path, steps: str) -> tuple[Path, Path]:
    root, outside = tmp_path / "project", tmp_path / "outside"
    (root / "data").mkdir(parents=True)
    outside.mkdir()
    for name in ("f.txt", "t.j2"):
        (root / "data" / name).write_text("inside\n")
        (outside / name).write_text(MARK + "\n")
    (root / "runner.toml").write_text("")
    swap = f"rm -rf data && ln -s '{outside}' data"
    pipeline = textwrap.dedent(
        f"""\
        runner: 1
        name: p
        steps:
          swap: {{uses: shell, cache: false, sandbox: false, with: {{run: "{swap}"}}}}
        """
    ) + textwrap.indent(textwrap.dedent(steps), "  ")
    (root / "pipeline.yaml").write_text(pipeline)
    return root, outside


def _apply(root: Path) -> tuple[int, str]:
    res = subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res.returncode, res.stdout + res.stderr


def _state_holds_mark(root: Path) -> bool:
    return any(
        MARK.encode() in p.read_bytes() for p in (root / ".runner").rglob("*") if p.is_file()
    )


@pytest.mark.parametrize(
    "steps",
    [
        "take: {uses: read, needs: [swap], with: {path: data/f.txt}}\n",
        "take: {uses: read, needs: [swap], with: {path: 'data/*.txt'}}\n",
        "take: {uses: template, needs: [swap], with: {template: data/t.j2}}\n",
    ],
    ids=["read", "read-glob", "template"],
)
def test_a_file_behind_a_directory_swapped_for_an_outside_link_is_refused(
    tmp_path: Path, steps: str
) -> None:
    root, _ = _project(tmp_path, steps)
    code, out = _apply(root)
    assert code != 0, out
    assert re.search("(outside|escapes) the pipeline root", out), out
    assert MARK not in out
    assert not _state_holds_mark(root)


def test_a_symlink_that_stays_inside_the_root_is_still_read(tmp_path: Path) -> None:
    root, _ = _project(tmp_path, "take: {uses: read, needs: [swap], with: {path: data/f.txt}}\n")
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("kept inside\n")
    pipeline = (root / "pipeline.yaml").read_text()
    (root / "pipeline.yaml").write_text(pipeline.replace(f"'{tmp_path / 'outside'}'", "real"))
    code, out = _apply(root)
    assert code == 0, out
    doc = json.loads(out[: out.rindex("}") + 1])
    assert [s["status"] for s in doc["steps"]] == ["ran", "ran"]
