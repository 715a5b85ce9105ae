"""Every data file in tests/bad_data/ read at run time is refused cleanly, at file:line:column.

A `read {as: yaml|json}` step over each file (see bad_data/cases.yaml) fails with the file's
position and message; the run ends `failed`, never left `running`; the step downstream does not
run; nothing prints a traceback; and `runs show --json` is strict JSON (no NaN can get there).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Project, runner_bin

HERE = Path(__file__).resolve().parent.parent / "bad_data"
CASES: dict[str, dict[str, Any]] = yaml.safe_load((HERE / "cases.yaml").read_text("utf-8"))

PIPELINE = """\
runner: 1
name: data
steps:
  load:
    uses: read
    with: {{path: data/{name}, as: {kind}}}
  use:
    uses: template
    with: {{text: "{{{{ d }}}}", vars: {{d: "${{{{ steps.load.output.data }}}}"}}}}
"""


def strict_json(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise AssertionError(f"{token} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_every_file_has_a_case_and_every_class_is_there() -> None:
    files = {p.name for p in HERE.iterdir()} - {"cases.yaml"}
    assert files == set(CASES)
    assert {p.rsplit(".", 1)[1] for p in files} == {"yaml", "json"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_data_file_fails_its_step_at_its_position(project: Project, name: str) -> None:
    case = CASES[name]
    (project.root / "data").mkdir()
    shutil.copy(HERE / name, project.root / "data" / name)
    kind = name.rsplit(".", 1)[1]
    project.write("pipeline.yaml", PIPELINE.format(name=name, kind=kind))

    doc = project.apply()

    assert doc["_exit"] == doc["exit_code"] == 4, doc  # a step failed
    assert "Traceback" not in doc["_stderr"]
    assert {s["id"]: s["status"] for s in doc["steps"]}["load"] == "failed"
    assert "use" not in {s["id"] for s in doc["steps"] if s["status"] in ("ran", "cached")}
    assert doc["run"]["status"] == "failed"
    where = f"data/{name}:{case['line']}:{case['column']}: "
    shown = project.cli("runs", "show", doc["run"]["id"], "--json")
    assert shown.exit_code == 0, shown.stderr
    record = strict_json(shown.stdout)
    assert record["run"]["status"] == "failed"
    errors = [e["error"] for e in record["executions"] if e["step_id"] == "load"]
    assert errors and where + case["message"] in errors[0], errors


def test_a_billion_laughs_data_file_is_refused_by_a_real_process(tmp_path: Path) -> None:
    """The 377-byte file that expands to 10^9 strings: a real `runner apply` refuses it (the
    time it takes is measured by bench/bench_input.py, not asserted here)."""
    (tmp_path / "data").mkdir()
    shutil.copy(HERE / "alias_bomb.yaml", tmp_path / "data" / "bomb.yaml")
    (tmp_path / "pipeline.yaml").write_text(
        PIPELINE.format(name="bomb.yaml", kind="yaml"), encoding="utf-8"
    )
    proc = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "data/bomb.yaml:6:1: aliases (*name) repeat over 100000 values" in proc.stderr
    assert strict_json(proc.stdout)["run"]["status"] == "failed"
