"""Issue 16 point 7: `runner gc` never deletes an object a running apply uses, whatever its age.

Real processes: an apply re-runs steps whose outputs are byte-identical to old objects nothing
references any more (so it reuses them without writing), while `runner gc --keep-last 0` starts
at a different moment of it each trial. Afterwards `runner verify` passes and the next apply
finds every recorded object.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Project, runner_bin

N = 60

PIPE = f"""\
runner: 1
name: race
params:
  salt: {{type: string, default: "0"}}
steps:
  make:
    uses: shell
    for_each: {list(range(N))}
    # the salt changes every element's key, never its output: old objects are reused
    with:
      run: "mkdir -p out && echo element ${{{{ item }}}} > out/e${{{{ item }}}}.txt && : ${{{{ params.salt }}}}"
      outputs: ["out/e${{{{ item }}}}.txt"]
"""


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), *args], cwd=root, capture_output=True, text=True, check=False
    )


def _age_objects(root: Path) -> None:
    """Make every object look old (written an hour ago), as in a long-lived project."""
    old = time.time() - 3600
    for p in (root / ".runner" / "objects").rglob("*"):
        if p.is_file() and len(p.parent.name) == 2:
            os.utime(p, (old, old))


@pytest.mark.parametrize("gc_delay_s", [0.0, 0.15, 0.3, 0.5, 0.8])
def test_gc_during_apply_deletes_nothing_the_apply_records(
    tmp_path: Path, gc_delay_s: float
) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPE, encoding="utf-8")
    project = Project(tmp_path)  # set-up and the check after, in-process; the race, real processes
    first = project.cli("apply", "pipeline.yaml", "-q", "-p", "salt=first")
    assert first.exit_code == 0, first.stderr
    gc_codes = []
    for trial in range(3):
        # The last run's objects are old, and gc forgets that run: then only the running
        # apply (new keys, same bytes) needs them.
        _age_objects(tmp_path)
        apply = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml", "-q", "-p", f"salt={trial}-{gc_delay_s}"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        time.sleep(gc_delay_s)
        gc = _run(tmp_path, "gc", "--keep-last", "0", "--wait", "120", "--json")
        _out, err = apply.communicate(timeout=300)
        assert apply.returncode == 0, err
        assert gc.returncode == 0, gc.stderr
        gc_codes.append(json.loads(gc.stdout)["exit_code"])
        verify = project.cli("verify", "--json")
        assert verify.json["ok"] is True, verify.stdout
    assert gc_codes == [0, 0, 0]


def test_gc_without_wait_refuses_while_an_apply_runs(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\nname: slow\nsteps:\n  nap: {uses: shell, with: {run: 'sleep 3'}}\n",
        encoding="utf-8",
    )
    apply = subprocess.Popen(
        [*runner_bin(), "apply", "pipeline.yaml", "-q"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / ".runner" / "journal.db").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.8)  # inside the step
        gc = _run(tmp_path, "gc", "--keep-last", "0", "--json")
        doc = json.loads(gc.stdout)
        assert gc.returncode == doc["exit_code"] != 0, gc.stdout
        assert "apply is using the object store" in doc["error"]["message"]
    finally:
        apply.communicate(timeout=120)
    assert apply.returncode == 0
    assert _run(tmp_path, "gc", "--keep-last", "0").returncode == 0  # alone now: it runs
