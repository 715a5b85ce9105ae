"""A step renamed (same type, arguments and inputs: the same key) is not run again: a key does
not name its step, and a step runs only when no completed execution has its key (issue 44)."""

from __future__ import annotations

from pathlib import Path

from runner.engine.run.apply import State, apply_plan
from runner.engine.run.options import ApplyOptions
from runner.pipeline.compiler import compile_pipeline
from tests.conftest import Project, statuses

BEFORE = """\
    runner: 1
    name: renamed
    steps:
      make:
        uses: shell
        with:
          run: "echo made >> ran.log && mkdir -p out && echo hello > out/a.txt && echo hello"
          outputs: [out/a.txt, ran.log]
      shout:
        uses: shell
        with:
          run: "echo ${{ steps.make.output.stdout | upper }} >> shouted.log"
          outputs: [shouted.log]
"""

AFTER = BEFORE.replace("make:", "build:").replace("steps.make.", "steps.build.")


def _ran(project: Project) -> str:
    """What the steps' bodies logged, each to its own declared output, make's first."""
    return "".join((project.root / log).read_text() for log in ("ran.log", "shouted.log"))


def _actions(project: Project) -> dict[str, str]:
    doc = project.cli("plan", "pipeline.yaml", "--json").json
    return {s["id"]: s["action"] for s in doc["steps"]}


def test_a_renamed_step_is_not_run_again(project: Project) -> None:
    project.write("pipeline.yaml", BEFORE)
    first = project.apply()
    assert first["_exit"] == 0 and statuses(first) == {"make": "ran", "shout": "ran"}
    log = _ran(project)
    assert log.startswith("made\nHELLO")
    project.write("pipeline.yaml", AFTER)
    assert _actions(project) == {"build": "cached", "shout": "cached"}
    again = project.apply()
    assert again["_exit"] == 0, again
    assert statuses(again) == {"build": "cached", "shout": "cached"}
    assert _ran(project) == log  # nothing ran again
    # its output file, deleted, comes back from the store without running
    (project.root / "out/a.txt").unlink()
    assert _actions(project)["build"] == "restore"
    restored = project.apply()
    assert statuses(restored)["build"] == "cached"
    assert (project.root / "out/a.txt").read_text() == "hello\n"
    # gc keeping only the run after the rename keeps the result it resolves to
    res = project.cli("gc", "--keep-last", "1", "--json")
    assert res.exit_code == 0 and res.json["runs_deleted"], res.stdout
    assert _actions(project) == {"build": "cached", "shout": "cached"}
    assert statuses(project.apply()) == {"build": "cached", "shout": "cached"}
    assert _ran(project) == log  # nothing ran again


def test_a_renamed_step_with_other_arguments_runs(project: Project) -> None:
    project.write("pipeline.yaml", BEFORE)
    assert project.apply()["_exit"] == 0
    project.write("pipeline.yaml", AFTER.replace("echo hello > out", "echo bye > out"))
    doc = project.apply()
    assert statuses(doc) == {"build": "ran", "shout": "cached"}, doc
    assert (project.root / "out/a.txt").read_text() == "bye\n"


# -- one long-lived journal (watch, serve): the step ids it knows, kept between applies -----------

CHAIN = """\
runner: 1
name: renamed
steps:
  {first}: {{uses: shell, with: {{run: "cat in.txt > one.txt", inputs: [in.txt], outputs: [one.txt]}}}}
  {second}: {{uses: shell, needs: [{first}], with: {{run: "cat one.txt > two.txt", inputs: [one.txt], outputs: [two.txt]}}}}
"""


def _apply_chain(root: Path, state: State, first: str, second: str) -> dict[str, str]:
    (root / "pipeline.yaml").write_text(CHAIN.format(first=first, second=second))
    plan = compile_pipeline(root / "pipeline.yaml", {})
    report = apply_plan(plan, state, ApplyOptions(jobs=1))
    return {o.id: o.status.value for o in report.steps}


def test_renames_seen_by_a_journal_kept_open_across_applies(tmp_path: Path) -> None:
    """The step ids a journal knows (Journal.step_ids) follow its own applies' rows and, once
    another connection wrote, are read again: a rename is found as by a fresh process."""
    (tmp_path / "in.txt").write_text("1\n")
    state = State.open(tmp_path / ".runner")
    other = State.open(tmp_path / ".runner")  # another process's connection, as it were
    try:
        assert _apply_chain(tmp_path, state, "a", "b") == {"a": "ran", "b": "ran"}
        (tmp_path / "in.txt").write_text("2\n")  # a miss: the step ids are read, and kept
        assert _apply_chain(tmp_path, state, "a", "b") == {"a": "ran", "b": "ran"}
        assert state.journal.step_ids("renamed") == {"a", "b"}
        # this connection's own rows: c and d complete keys that a and b then take
        (tmp_path / "in.txt").write_text("3\n")
        assert _apply_chain(tmp_path, state, "c", "d") == {"c": "ran", "d": "ran"}
        assert _apply_chain(tmp_path, state, "a", "b") == {"a": "cached", "b": "cached"}
        # another connection's rows (e, f) are seen by this one once it wrote
        (tmp_path / "in.txt").write_text("4\n")
        assert _apply_chain(tmp_path, other, "e", "f") == {"e": "ran", "f": "ran"}
        assert _apply_chain(tmp_path, state, "a", "b") == {"a": "cached", "b": "cached"}
        assert {"e", "f"} <= state.journal.step_ids("renamed")
    finally:
        other.close()
        state.close()
