"""`runner apply` of a plain command line is answered before click loads (quickapply.py), with
what the click command prints, journals and exits with (a no-op, a run, a failed step, an
error); any other command line is left to click."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.surfaces.cli.app import cli
from runner.surfaces.cli.quickapply import parse
from tests.engine.test_fastpath import age_files

PIPELINE = """\
runner: 1
name: one
steps:
  a:
    uses: shell
    with: {run: "cat in.txt > out.txt", inputs: [in.txt], outputs: [out.txt]}
"""

# Runs `runner apply` as the console command does and records the modules it loaded.
PROBE = """
import json, sys
sys.argv = ["runner", *json.loads(sys.argv[1])]
from runner.surfaces.cli.entry import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
with open("modules.json", "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _run(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    found = json.loads((cwd / "modules.json").read_text())
    return res, found


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNNER_STATE", raising=False)
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "in.txt").write_text("hi\n")
    # (no runner.toml: a config file changed in the last 2 s keeps the fingerprint from being
    # recorded, and utime cannot age its ctime)
    for again in (False, True):  # the second apply records the fingerprint of the aged files
        res = CliRunner().invoke(cli, ["apply", "pipeline.yaml", "-q"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        if not again:
            age_files(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["apply", "p.yaml"], ("p.yaml", {}, None, None, False)),
        (
            ["apply", "-q", "--jobs", "2", "p.yaml", "--json", "-p", "a=1", "--param=b= 2"],
            ("p.yaml", {"a": "1", "b": " 2"}, None, None, True),
        ),
        (
            ["apply", "p.yaml", "--item=x", "--state", "st", "-j", "3"],
            ("p.yaml", {}, "x", "st", False),
        ),
    ],
)
def test_plain_command_lines_are_read(
    argv: list[str], expected: tuple[object, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNNER_STATE", raising=False)
    args = parse(argv)
    assert args is not None
    assert (args.file, args.params, args.item, args.state, args.as_json) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["plan", "p.yaml"],
        ["apply"],
        ["apply", "a.yaml", "b.yaml"],
        ["apply", "p.yaml", "--force", "a"],
        ["apply", "p.yaml", "--dry-run"],
        ["apply", "p.yaml", "--jobs", "0"],
        ["apply", "p.yaml", "--jobs", "two"],
        ["apply", "p.yaml", "--jobs"],
        ["apply", "p.yaml", "-j2"],
        ["apply", "p.yaml", "-p", "novalue"],
        ["apply", "p.yaml", "--item", "a", "--item", "b"],
        ["apply", "p.yaml", "--json=1"],
        ["apply", "--", "p.yaml"],
        ["apply", "p.yaml", "--help"],
        ["apply", "p\udcff.yaml"],
    ],
)
def test_anything_else_is_left_to_click(argv: list[str]) -> None:
    assert parse(argv) is None


def test_runner_state_is_the_state_when_no_option_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUNNER_STATE", "elsewhere")
    args = parse(["apply", "p.yaml"])
    assert args is not None and args.state == "elsewhere"
    args = parse(["apply", "p.yaml", "--state", "here"])
    assert args is not None and args.state == "here"


def test_a_no_op_is_answered_without_click_as_the_full_command_answers(project: Path) -> None:
    res, found = _run(project, "apply", "pipeline.yaml", "-q", "--jobs", "2")
    assert found["code"] == 0, res.stderr
    modules = found["modules"]
    assert isinstance(modules, list)
    assert not {"click", "asyncio", "dataclasses", "tomllib"} & set(modules), (res.stdout, res.stderr)
    quick = res.stdout
    full = CliRunner().invoke(cli, ["apply", "pipeline.yaml", "-q"], catch_exceptions=False)
    assert full.exit_code == 0
    # the same line, each with its own run id
    assert quick.rsplit("(run ", 1)[0] == full.output.rsplit("(run ", 1)[0]
    assert quick.endswith("; nothing changed)\n")

    res, found = _run(project, "apply", "pipeline.yaml", "--json")
    assert found["code"] == 0 and "click" not in found["modules"]  # type: ignore[operator]
    quick_doc = json.loads(res.stdout)
    full = CliRunner().invoke(cli, ["apply", "pipeline.yaml", "--json"], catch_exceptions=False)
    full_doc = json.loads(full.output)
    quick_doc["run"].pop("id")
    full_doc["run"].pop("id")
    assert quick_doc == full_doc

    runs = CliRunner().invoke(cli, ["runs", "list", "--json"], catch_exceptions=False)
    assert len(json.loads(runs.output)["runs"]) == 6  # two applies, then four no-ops


def test_a_run_with_work_to_do_runs_without_click(project: Path) -> None:
    (project / "out.txt").unlink()
    res, found = _run(project, "apply", "pipeline.yaml", "-q")
    assert found["code"] == 0, res.stderr
    assert "click" not in found["modules"]  # type: ignore[operator]
    assert (project / "out.txt").read_text() == "hi\n"


FAILS = """\
runner: 1
name: two
params:
  n: {type: integer, default: 1}
steps:
  a:
    uses: shell
    with: {run: "echo made > a.txt", outputs: [a.txt]}
  b:
    uses: shell
    needs: [a]
    with: {run: "echo 'no \\e[31m luck' >&2; exit 3"}
"""
INVALID = """\
runner: 1
name: bad
steps:
  a: {uses: shell, with: {run: "true"}, colour: red}
"""
_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
_SECONDS = re.compile(r"\d+(\.\d+)?s\b|\"duration_s\": [0-9.e-]+")


def _shown(res: subprocess.CompletedProcess[str], code: object) -> tuple[object, str, str]:
    def plain(text: str) -> str:
        return _SECONDS.sub("T", _RUN_ID.sub("RUN", text))

    return code, plain(res.stdout), plain(res.stderr)


@pytest.mark.parametrize(
    ("pipeline", "toml", "args"),
    [
        (FAILS, "", ()),
        (FAILS, "", ("--json",)),
        (FAILS, "", ("-q", "-p", "n=2")),
        (FAILS, None, ()),  # no project here: the new state is said on stderr
        (FAILS, "", ("-p", "n=two")),  # a param of the wrong type
        (FAILS, "", ("-p", "nope=1", "--json")),
        (INVALID, "", ()),
        (INVALID, "", ("--json",)),
        (PIPELINE, "", ("--item", "x")),  # in.txt is missing
        (None, "", ()),  # no pipeline file
    ],
)
def test_the_quick_apply_prints_and_exits_as_the_click_command(
    tmp_path: Path, pipeline: str | None, toml: str | None, args: tuple[str, ...]
) -> None:
    shown = []
    for way, jobs in (("quick", ("--jobs", "2")), ("click", ("-j2",))):  # -j2: left to click
        root = tmp_path / way
        root.mkdir()
        if pipeline is not None:
            (root / "pipeline.yaml").write_text(pipeline)
        if toml is not None:
            (root / "runner.toml").write_text(toml)
        outcomes = []
        for _ in range(2):  # a run, then the same again (a no-op, or the failure again)
            res, found = _run(root, "apply", "pipeline.yaml", *jobs, *args)
            assert ("click" in found["modules"]) is (way == "click")  # type: ignore[operator]
            outcomes.append(_shown(res, found["code"]))
        shown.append(outcomes)
        shutil.rmtree(root / ".runner", ignore_errors=True)
    assert shown[0] == shown[1]


def test_a_bad_option_value_gets_clicks_message(project: Path) -> None:
    res, found = _run(project, "apply", "pipeline.yaml", "--jobs", "0")
    assert found["code"] == 2
    assert "--jobs" in res.stderr
