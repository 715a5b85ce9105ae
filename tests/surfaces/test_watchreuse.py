"""What a watch cycle keeps from the one before to decide what it reuses (surfaces/watchreuse.py):
the reads of the last run by file name, and the files of the results its outcomes stand on --
each only where the answer is the one a check from scratch gives."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from runner.engine.run.apply import State, apply_plan
from runner.engine.run.files import FileHasher
from runner.engine.run.options import ApplyOptions
from runner.engine.run.outcomes import RunReport, RunStatus, StepOutcome, StepStatus
from runner.engine.run.preflight import check_plan
from runner.errors import InvalidPipeline
from runner.pipeline.compiler import Plan, compile_pipeline
from runner.source.paths import forget
from runner.surfaces.watchreuse import HoldCheck, Readers
from runner.surfaces.watchset import DirResolver

PIPELINE = """\
runner: 1
name: hold
steps:
  a: {uses: shell, with: {run: "cat src/a.txt > out/a.txt", inputs: [src/a.txt], outputs: [out/a.txt]}}
  b: {uses: shell, needs: [a], with: {run: "cat out/a.txt > out/b.txt", inputs: [out/a.txt], outputs: [out/b.txt]}}
  c: {uses: shell, with: {run: "echo c"}}
"""


def _outcome(sid: str, *reads: str) -> StepOutcome:
    return StepOutcome(sid, StepStatus.RAN, "k", reads=frozenset(reads))


def test_readers_find_what_resolving_every_read_finds(tmp_path: Path) -> None:
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "src")
    steps = [
        _outcome("plain", "src/a.txt"),
        _outcome("walk", "src/deep/../a.txt"),
        _outcome("linked", "link/a.txt"),
        _outcome("other", "src/b.txt", "src/deep/a.txt"),
        _outcome("odd", "src/.."),  # no file name: asked about every change
        _outcome("none"),
    ]
    report = RunReport("r", "p", RunStatus.COMPLETED, None, steps, 0)
    readers = Readers(report, [o.id for o in steps])
    norm = DirResolver(tmp_path)
    for changed in (
        {str(tmp_path.resolve() / "src" / "a.txt")},
        {str(tmp_path.resolve() / "src" / "deep" / "a.txt")},
        {str(tmp_path.resolve())},
        {str(tmp_path.resolve() / "src" / "b.txt"), str(tmp_path.resolve() / "x.txt")},
    ):
        every = {o.id for o in steps if any(norm.text(r) in changed for r in o.reads)}
        assert readers.reaching(changed, DirResolver(tmp_path)) == every, changed
    assert readers.reaching({str(tmp_path.resolve() / "src" / "a.txt")}, norm) == {
        "plain",
        "walk",
        "linked",
    }


def _applied(root: Path) -> tuple[State, RunReport]:
    (root / "src").mkdir()
    (root / "out").mkdir()
    (root / "src/a.txt").write_text("a\n")
    (root / "pipeline.yaml").write_text(PIPELINE)
    plan = compile_pipeline(root / "pipeline.yaml", {})
    state = State.open(root / ".runner")
    return state, apply_plan(plan, state, ApplyOptions(jobs=1))


def test_the_results_known_from_the_last_check_are_read_again_once_another_wrote(
    tmp_path: Path,
) -> None:
    state, last = _applied(tmp_path)
    try:
        plan = compile_pipeline(tmp_path / "pipeline.yaml", {})
        done = {o.id: o for o in last.steps}
        check = HoldCheck()

        def gone() -> set[str]:
            return check.no_longer_hold(state, plan, done, last.run_id, FileHasher(state.journal))

        assert gone() == set()
        # an output edited by hand: its step does not hold (a stat each check, known or not)
        (tmp_path / "out/b.txt").write_text("edited\n")
        assert gone() == {"b"}
        os.unlink(tmp_path / "out/b.txt")
        assert gone() == {"b"}
        (tmp_path / "out/b.txt").write_text("a\n")
        assert gone() == set()
        # another connection (gc, `runner edit`, another apply) deletes a's result: seen
        other = sqlite3.connect(tmp_path / ".runner" / "journal.db")
        with other:
            other.execute("DELETE FROM executions WHERE step_id='a'")
        other.close()
        assert gone() == {"a"}
    finally:
        state.close()


def test_a_cycle_keeps_the_results_of_the_steps_it_reused_only(tmp_path: Path) -> None:
    """This process's own applies write results without another connection seeing a change:
    a step that ran (a new result for the same key may now be the latest) is read again."""
    state, last = _applied(tmp_path)
    try:
        plan = compile_pipeline(tmp_path / "pipeline.yaml", {})
        done = {o.id: o for o in last.steps}
        check = HoldCheck()
        check.no_longer_hold(state, plan, done, last.run_id, FileHasher(state.journal))
        # this connection: a's result now names another digest (as a re-run would)
        state.journal.conn.execute(
            "UPDATE executions SET files=? WHERE step_id='a'", ('{"out/a.txt": "0000"}',)
        )
        state.journal.conn.commit()
        hasher = FileHasher(state.journal)
        assert check.no_longer_hold(state, plan, done, last.run_id, hasher) == set()  # (known)
        check.keep({"b", "c"})  # a cycle that reused b and c (a ran)
        assert check.no_longer_hold(state, plan, done, last.run_id, hasher) == {"a"}
    finally:
        state.close()


def _verdict(plan: Plan, found: frozenset[str] = frozenset()) -> str | None:
    """check_plan's answer from the disk as it is now (no resolution remembered)."""
    forget()
    try:
        check_plan(plan, outputs_found=found)
    except InvalidPipeline as exc:
        return exc.message
    return None


def test_the_outputs_found_below_the_root_spare_check_plan_only_where_it_would_pass(
    tmp_path: Path,
) -> None:
    """A reused shell step whose outputs the hold check found as regular files below the root
    (no part a symlink) skips check_plan's look at them: check_plan then answers as the full
    check does, whatever became of the outputs' directory or the outputs themselves."""
    root = tmp_path / "p"
    root.mkdir()
    state, last = _applied(root)
    try:
        plan = compile_pipeline(root / "pipeline.yaml", {})
        done = {o.id: o for o in last.steps}
        check = HoldCheck()

        def found() -> tuple[set[str], frozenset[str]]:
            gone = check.no_longer_hold(state, plan, done, last.run_id, FileHasher(state.journal))
            return gone, frozenset(check.outputs_found)

        def same_verdict(found: frozenset[str]) -> None:
            assert _verdict(plan, found) == _verdict(plan)

        assert found() == (set(), {"a", "b", "c"})  # (c declares no output)
        same_verdict(frozenset({"a", "b", "c"}))
        # b's output a symlink to a file of the same bytes: still holding, not found
        os.rename(root / "out/b.txt", root / "b-real.txt")
        (root / "out/b.txt").symlink_to(root / "b-real.txt")
        assert found() == (set(), {"a", "c"})
        same_verdict(frozenset({"a", "c"}))
        os.unlink(root / "out/b.txt")
        os.rename(root / "b-real.txt", root / "out/b.txt")
        # the outputs' directory moved inside the root, a symlink in its place: not found
        os.rename(root / "out", root / "elsewhere")
        (root / "out").symlink_to(root / "elsewhere")
        assert found() == (set(), {"c"})
        same_verdict(frozenset({"c"}))
        # ... moved out of the root: the full check refuses the plan, and so does this one
        os.unlink(root / "out")
        os.rename(root / "elsewhere", tmp_path / "outside")
        (root / "out").symlink_to(tmp_path / "outside")
        assert found() == (set(), {"c"})
        assert _verdict(plan) is not None
        same_verdict(frozenset({"c"}))
        # back as it was: found again
        os.unlink(root / "out")
        os.rename(tmp_path / "outside", root / "out")
        assert found() == (set(), {"a", "b", "c"})
        same_verdict(frozenset({"a", "b", "c"}))
    finally:
        state.close()


def test_the_outputs_of_steps_about_to_run_are_found_as_check_plan_would(tmp_path: Path) -> None:
    """The steps a cycle runs again: found only while each output is a regular file below the
    root, so check_plan answers as the full check does (a folder in an output's place fails)."""
    state, _ = _applied(tmp_path)
    state.close()
    plan = compile_pipeline(tmp_path / "pipeline.yaml", {})
    check = HoldCheck()

    def found() -> frozenset[str]:
        check.outputs_found = set()
        check.find_outputs(plan, ["a", "b", "c"])
        return frozenset(check.outputs_found)

    assert found() == {"a", "b", "c"}
    assert _verdict(plan, found()) is None
    os.unlink(tmp_path / "out/a.txt")  # not made yet: not found, and nothing to refuse
    assert found() == {"b", "c"}
    assert _verdict(plan, found()) is None
    (tmp_path / "out/a.txt").mkdir()  # a folder where an output goes: the plan is refused
    assert found() == {"b", "c"}
    assert _verdict(plan) is not None
    assert _verdict(plan, found()) == _verdict(plan)
