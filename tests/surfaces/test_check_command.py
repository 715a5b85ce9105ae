"""`runner check`: rule lint through the CLI."""

from __future__ import annotations

from tests.conftest import Project

LINT = """\
runner: 1
name: lint
params:
  n: {type: integer, default: 3}
patterns:
  unused_pat: "^x$"
rules:
  never_used: "${{ true }}"
steps:
  a:
    uses: shell
    when: "${{ params.n == 'three' }}"
    with: {run: "true"}
  b:
    uses: shell
    when: "${{ steps.a.output.exit_code == 0 }}"
    with: {run: "true"}
"""


def test_check_reports_each_lint(project: Project) -> None:
    project.write("pipeline.yaml", LINT)
    res = project.cli("check", "pipeline.yaml", "--json")
    assert res.exit_code == 0
    codes = sorted(w["code"] for w in res.json["warnings"])
    assert codes == ["never-true", "skipped-ref", "unused-pattern", "unused-rule"]
    wheres = {w["code"]: w["where"] for w in res.json["warnings"]}
    assert wheres["never-true"].endswith("pipeline.yaml:12:11")
    strict = project.cli("check", "pipeline.yaml", "--strict")
    assert strict.exit_code == 2 and "can never be true" in strict.stdout


def test_clean_pipeline_has_no_warnings(project: Project) -> None:
    project.write(
        "pipeline.yaml", "runner: 1\nname: ok\nsteps:\n  a: {uses: shell, with: {run: 'true'}}\n"
    )
    res = project.cli("check", "pipeline.yaml", "--strict", "--json")
    assert res.exit_code == 0 and res.json["warnings"] == []
