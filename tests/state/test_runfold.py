"""Unchanged re-applies are folded (issue 42): `runs list` shows one line per result, not one per
apply, and says how many applies repeated it; `--all` lists each; `--json` lists every run with
the run it repeats (``repeat_of``). Each apply still journals its run (what `latest` names)."""

from __future__ import annotations

import re

from tests.conftest import Project

PIPELINE = """\
    runner: 1
    name: noted
    params:
      word: {type: string, default: one}
    steps:
      note:
        uses: shell
        with: {run: "cat in.txt", inputs: [in.txt]}
      say:
        uses: template
        for_each: "${{ ['a', 'b'] }}"
        with: {text: "${{ item }} ${{ params.word }}"}
"""

RUN_LINE = re.compile(r"^(\d{8}-\d{6}-[0-9a-f]{6})  ", re.M)


def _listed(project: Project, *args: str) -> tuple[list[str], str]:
    res = project.cli("runs", "list", *args)
    assert res.exit_code == 0, res.stderr
    return RUN_LINE.findall(res.stdout), res.stdout


def test_unchanged_reapplies_fold_into_one_line(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    project.write("in.txt", "first\n")
    ids = [project.apply()["run"]["id"] for _ in range(4)]
    assert len(set(ids)) == 4  # each apply is a run of its own
    # only the first ran anything
    shown, text = _listed(project)
    assert shown == [ids[3]], text
    assert f"unchanged since {ids[0]}: 3 earlier runs folded (runs list --all)" in text
    every, _ = _listed(project, "--all")
    assert every == ids[::-1]
    doc = project.cli("runs", "list", "--json").json
    assert [(r["id"], r["repeat_of"]) for r in doc["runs"]] == [
        (ids[3], ids[2]),
        (ids[2], ids[1]),
        (ids[1], ids[0]),
        (ids[0], None),
    ]
    latest = project.cli("runs", "show", "latest", "--json").json["run"]
    assert (latest["id"], latest["repeat_of"]) == (ids[3], ids[2])
    assert project.cli("runs", "show", ids[0], "--json").json["run"]["repeat_of"] is None
    shown = project.cli("runs", "show", ids[3]).stdout
    assert f"Repeats   {ids[2]} (an unchanged re-apply: nothing ran)" in shown

    # an input changes: a new result, listed; its own repeats fold into it, not the first
    project.write("in.txt", "second\n")
    changed = project.apply()["run"]["id"]
    again = project.apply()["run"]["id"]
    shown, text = _listed(project)
    assert shown == [again, ids[3]], text
    assert f"unchanged since {changed}: 1 earlier run folded" in text
    # other params are another result (the steps they feed ran), and so is a failed run
    other = project.apply("-p", "word=two")["run"]["id"]
    (project.root / "in.txt").unlink()
    failed = project.apply("-p", "word=two")
    assert failed["_exit"] != 0
    shown, _ = _listed(project)
    assert shown == [failed["run"]["id"], other, again, ids[3]]


def test_the_limit_counts_lines_not_runs(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    project.write("in.txt", "first\n")
    firsts = [project.apply()["run"]["id"] for _ in range(5)]
    project.write("in.txt", "second\n")
    seconds = [project.apply()["run"]["id"] for _ in range(5)]
    shown, text = _listed(project, "--limit", "2")
    assert shown == [seconds[-1], firsts[-1]], text
    assert f"unchanged since {firsts[0]}: 4 earlier runs folded" in text
    shown, _ = _listed(project, "--limit", "1")
    assert shown == [seconds[-1]]
    every, _ = _listed(project, "--all", "--limit", "3")
    assert every == seconds[:1:-1]
