"""Every broken pipeline in tests/bad_pipelines/ is refused cleanly by `validate` and `apply`.

Each case (see bad_pipelines/cases.yaml) must exit 2 and print one message naming
file:line:column, with no traceback, from both commands; `--json` gives one error document.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from runner.surfaces.cli.app import cli
from tests.conftest import Result

HERE = Path(__file__).resolve().parent.parent / "bad_pipelines"
CASES: dict[str, dict[str, Any]] = yaml.safe_load((HERE / "cases.yaml").read_text("utf-8"))


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A copy, so an apply that wrongly got as far as opening state would not litter the repo.
    target = tmp_path_factory.mktemp("bad") / "bad_pipelines"
    shutil.copytree(HERE, target)
    return target


def run_cli(cwd: Path, *args: str) -> Result:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return Result(res.exit_code, res.stdout, res.stderr)


def test_every_file_has_a_case_and_there_are_enough() -> None:
    files = {p.name for p in HERE.glob("*.yaml")} - {"cases.yaml"}
    assert files == set(CASES)
    assert len(files) >= 30


def _check(case: dict[str, Any], name: str, res: Result, command: str) -> None:
    assert res.exit_code == 2, (command, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    where = f"{case.get('file', name)}:{case['line']}:{case['column']}: "
    assert where in res.stderr, (command, res.stderr)
    assert case["message"] in res.stderr, (command, res.stderr)
    if "hint" in case:
        assert "hint: " in res.stderr and case["hint"] in res.stderr.split("hint: ", 1)[1]
    # One message, not a cascade.
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")] == [
        res.stderr.splitlines()[0]
    ], res.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_refuses(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "validate", name)
    _check(CASES[name], name, res, "validate")
    assert res.stdout == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_apply_refuses_before_running_anything(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "apply", name, "--json", "--state", str(bad_dir.parent / "state"))
    _check(CASES[name], name, res, "apply")
    doc = res.json
    assert doc["exit_code"] == 2
    step = doc["error"]["step"]
    assert CASES[name]["message"] in (f"step '{step}': " if step else "") + doc["error"]["message"]
    assert (
        doc["error"]["where"] == f"{CASES[name].get('file', name)}:{CASES[name]['line']}:"
        f"{CASES[name]['column']}"
    )
    assert not (bad_dir.parent / "state").exists()
    assert not (bad_dir / ".runner").exists()


# -- `-p` overrides: a command-line mistake is a usage error pointing at the declaration ----------

OVERRIDES = [
    # args, message fragment, hint fragment, line:column of the declaration (None: no location)
    (
        ["-p", "video_id=v", "-p", "titel=x"],
        "unknown param 'titel' (-p titel=...)",
        "did you mean 'title'?",
        "3:1",
    ),
    (
        ["-p", "video_id=v", "-p", "count=abc"],
        "param 'count' must be integer, found string 'abc' (from -p count=abc)",
        None,
        "5:3",
    ),
    (
        ["-p", "video_id=v", "-p", "count=0"],
        "param 'count': 0 is less than the minimum of 1",
        None,
        "5:3",
    ),
    (
        ["-p", "video_id=v", "-p", "mode=medium"],
        "param 'mode': 'medium' is not one of",
        None,
        "6:3",
    ),
    (
        ["-p", "video_id=v", "-p", "count=[1, 2]"],
        "param 'count' must be integer, found a list",
        None,
        "5:3",
    ),
    ([], "param 'video_id' is required", "pass it with -p video_id=VALUE", "7:3"),
    (["-p", "video_id"], "-p expects KEY=VALUE, got 'video_id'", None, None),
    # issue 16: values read as YAML 1.2, as JSON can carry them, with no crash
    (["-p", "video_id=v", "-p", "count=" + "9" * 5000],
     "param 'count': an integer of 5000 digits is over the limit of 4300", None, "5:3"),
    (["-p", "video_id=v", "-p", "count=1\udcff"],
     "param 'count': not UTF-8 text (byte 0xff at offset 1) (from -p count=1\\xff)", None, "5:3"),
    (["-p", "video_id=\udcfe"],
     "param 'video_id': not UTF-8 text (byte 0xfe at offset 0)", None, "7:3"),
    (["-p", "video_id=v", "-p", "\udcff=1"], "unknown param '\\xff'", None, "3:1"),
    (["-p", "video_id=v", "-p", "ratio=.nan"],
     "param 'ratio': '.nan' is not a number JSON can carry", None, "8:3"),
    (["-p", "video_id=v", "-p", "ratio=-.inf"],
     "param 'ratio': '-.inf' is not a number JSON can carry", None, "8:3"),
    (["-p", "video_id=v", "-p", "ratio=1e999"], "param 'ratio': the number 1e999 is out of range",
     None, "8:3"),
    (["-p", "video_id=v", "-p", "count=!!binary aGVsbG8="],
     "param 'count': values tagged !!binary are not supported", None, "5:3"),
    (["-p", "video_id=v", "-p", "opts=!!python/object/apply:os.system [id]"],
     "param 'opts': values tagged !!python/object/apply:os.system are not supported", None,
     "10:3"),
    (["-p", "video_id=v", "-p", "opts={1: x}"],
     "param 'opts': a mapping key must be a string, found integer 1", None, "10:3"),
    (["-p", "video_id=v", "-p", "tags=[1, x]"], "param 'tags[1]' must be integer, found string 'x'",
     None, "9:3"),
    (["-p", "video_id=v", "-p", "count=2024-01-01"],
     "param 'count' must be integer, found string '2024-01-01'", None, "5:3"),
    (["-p", "video_id=v", "-p", "tags=[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a],"
      " &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c],"
      " &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d], [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]]"],
     "param 'tags': aliases (*name) repeat over 100000 values", None, "9:3"),
]


@pytest.mark.parametrize("command", ["validate", "apply"])
@pytest.mark.parametrize(("args", "message", "hint", "where"), OVERRIDES)
def test_bad_overrides(
    bad_dir: Path, command: str, args: list[str], message: str, hint: str | None, where: str | None
) -> None:
    res = run_cli(bad_dir / "overrides", command, "params.yaml", *args)
    assert res.exit_code == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert message in res.stderr
    if hint:
        assert f"hint: {hint}" in res.stderr
    if where:
        assert f"params.yaml:{where}: " in res.stderr
    assert not (bad_dir / "overrides" / ".runner").exists()


def test_overrides_are_read_as_yaml_1_2(bad_dir: Path) -> None:
    """`-p count=010` is ten (not octal 8), `-p title=NO` the text NO (not false), `12:30` and
    dates stay text, and a string param takes any text as typed."""
    res = run_cli(bad_dir / "overrides", "apply", "params.yaml", "--json",
                  "--state", str(bad_dir.parent / "state12"),
                  "-p", "video_id=12:30", "-p", "count=010", "-p", "title=NO",
                  "-p", "mode=slow", "-p", "ratio=1e3", "-p", "tags=[0o17, 0x1F, 7]")
    assert res.exit_code == 0, res.stderr
    shown = run_cli(bad_dir / "overrides", "runs", "show", res.json["run"]["id"], "--json",
                    "--state", str(bad_dir.parent / "state12"))
    record = shown.json
    assert record["run"]["params"] == {
        "video_id": "12:30", "count": 10, "title": "NO", "mode": "slow", "ratio": 1000.0,
        "tags": [15, 31, 7], "opts": {},
    }
    assert record["executions"][0]["output"]["text"] == "NO x10 (slow) 12:30"


def test_good_overrides_pass(bad_dir: Path) -> None:
    res = run_cli(
        bad_dir / "overrides",
        "validate",
        "params.yaml",
        "-p",
        "video_id=42",
        "-p",
        "count=3",
        "-p",
        "title=123",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    assert res.json == {"pipeline": "overrides", "valid": True, "steps": 1, "exit_code": 0}


@pytest.fixture
def chdir_bad(bad_dir: Path) -> Iterator[Path]:
    old = Path.cwd()
    os.chdir(bad_dir)
    try:
        yield bad_dir
    finally:
        os.chdir(old)


@pytest.mark.parametrize(
    "name",
    [
        "missing_template.yaml",
        "path_parent.yaml",
        "path_absolute.yaml",
        "template_var_missing.yaml",
    ],
)
def test_step_type_validate_errors_name_the_step(bad_dir: Path, name: str) -> None:
    res = run_cli(bad_dir, "validate", name)
    assert "step 'a': " in res.stderr


def test_a_deleted_working_directory_is_a_clean_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = tmp_path / "gone"
    script = f'mkdir "{gone}" && cd "{gone}" && rmdir "{gone}" && exec "$0" -m runner "$@"'
    proc = subprocess.run(
        ["/bin/sh", "-c", script, sys.executable, "apply", "pipeline.yaml", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "current directory no longer exists" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert '"exit_code": 2' in proc.stdout
