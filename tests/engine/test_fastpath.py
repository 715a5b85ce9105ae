"""The no-op fast path: it answers only when nothing changed, and falls through otherwise."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Project, ran
from tests.engine.test_apply import chain


def age_files(root: Path) -> None:
    """Push every workspace file's mtime into the past (past the racily-clean window)."""
    past = time.time() - 60
    for p in root.rglob("*"):
        if p.is_file() and ".runner" not in p.parts:
            os.utime(p, (past, past))


def converge(project: Project) -> dict:
    project.apply()
    age_files(project.root)
    return project.apply()  # re-hashes the aged files and records the fingerprint


def fast(doc: dict, project: Project) -> bool:
    db = sqlite3.connect(project.root / ".runner/journal.db")
    try:
        row = db.execute(
            "SELECT data FROM events WHERE run_id=? AND type='RunStarted'", (doc["run"]["id"],)
        ).fetchone()
    finally:
        db.close()
    return '"fast_path": true' in row[0]


def shown(project: Project, run: str) -> dict:
    """`runs show RUN --json`."""
    res = project.cli("runs", "show", run, "--json", "--state", ".runner")
    assert res.exit_code == 0, res.stderr
    return res.json


def test_nothing_changed_is_answered_by_the_fingerprint(project: Project) -> None:
    chain(project)
    second = converge(project)
    assert not fast(second, project)
    third = project.apply()
    assert fast(third, project)
    assert third["summary"] == {"ran": 0, "cached": 4, "skipped": 0, "failed": 0}
    assert [s["key"] for s in third["steps"]] == [s["key"] for s in second["steps"]]
    assert project.cli("runs", "show", third["run"]["id"], "--state", ".runner").exit_code == 0
    assert project.cli("verify", "--state", ".runner").exit_code == 0


def test_an_edit_falls_through_and_reruns(project: Project) -> None:
    chain(project)
    converge(project)
    project.write("in3.txt", "edited\n")
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"s3", "s4"}


def test_deleted_output_and_object_fall_through(project: Project) -> None:
    chain(project)
    converge(project)
    (project.root / "out/2.txt").unlink()
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == set()
    assert (project.root / "out/2.txt").exists()
    age_files(project.root)
    project.apply()
    objects = [p for p in (project.root / ".runner/objects").rglob("*") if p.is_file()]
    objects[0].chmod(0o644)
    objects[0].unlink()
    doc = project.apply()
    assert not fast(doc, project) and len(ran(doc)) >= 1


def test_a_no_op_run_row_reads_as_a_full_paths(project: Project) -> None:
    """Params, progress per phase and the last phase: `runs show` gives a no-op run what it
    gives the fully cached run before it (only ids, times, the pid and the run each repeats
    differ)."""
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        phases: [one, two]
        params:
          word: {type: string, default: a}
        steps:
          h: {uses: hash, phase: one, with: {value: "${{ params.word }}"}}
          g: {uses: hash, phase: two, with: {value: "${{ steps.h.output.short }}"}}
          k: {uses: hash, with: {value: b}}
    """,
    )
    project.apply("-p", "word=b")
    shutil.rmtree(project.root / ".runner/converged")
    full = project.apply("-p", "word=b")  # fully cached, on the full path
    noop = project.apply("-p", "word=b")
    assert fast(noop, project) and not fast(full, project)

    def row(run: str) -> dict[str, object]:
        out = dict(shown(project, run)["run"])
        for varies in ("id", "created_at", "finished_at", "pid", "repeat_of"):
            out.pop(varies)
        return out

    assert row(noop["run"]["id"]) == row(full["run"]["id"])
    assert row(noop["run"]["id"])["params"] == {"word": "b"}


def test_pipeline_params_and_config_changes_fall_through(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        params:
          word: {type: string, default: a}
        steps:
          h: {uses: hash, with: {value: "${{ params.word }}"}}
    """,
    )
    converge(project)
    assert fast(project.apply(), project)
    assert not fast(project.apply("-p", "word=b"), project)
    project.write("runner.toml", '[general]\ndefault_provider = "fake"\n')
    assert not fast(project.apply(), project)
    text = (project.root / "pipeline.yaml").read_text().replace("default: a", "default: c")
    (project.root / "pipeline.yaml").write_text(text)
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"h"}


def test_an_edit_of_comments_or_layout_keeps_the_fingerprint(project: Project) -> None:
    # The edit that changes no key (issue 17 section 5): no compile, the same keys.
    chain(project)
    second = converge(project)
    path = project.root / "pipeline.yaml"
    text = path.read_text()
    path.write_text("# the chain, commented\n" + text.replace("\n", "   # why\n", 2) + "\n\n")
    third = project.apply()
    assert fast(third, project) and ran(third) == set()
    assert [s["key"] for s in third["steps"]] == [s["key"] for s in second["steps"]]
    assert fast(project.apply(), project)  # the new bytes were remembered


def test_an_edit_the_parser_sees_falls_through(project: Project) -> None:
    # Quoting makes 1 a string: same text without comments, another document, another key.
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          h: {uses: hash, with: {value: 1}}
          g: {uses: hash, with: {value: 2}}
    """,
    )
    converge(project)
    text = (project.root / "pipeline.yaml").read_text()
    (project.root / "pipeline.yaml").write_text(text.replace("value: 1", 'value: "1"'))
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"h"}
    converge(project)
    # quoting, flow or block style and an anchor that yield the same values: the same document
    text = (project.root / "pipeline.yaml").read_text()
    text = text.replace('value: "1"', "value: &one '1'")
    (project.root / "pipeline.yaml").write_text(text)
    doc = project.apply()
    assert fast(doc, project) and ran(doc) == set()
    # a reordering is another digest (only speed is lost): the full path, which reruns nothing
    lines = (project.root / "pipeline.yaml").read_text().splitlines(keepends=True)
    (project.root / "pipeline.yaml").write_text("".join([*lines[:3], lines[4], lines[3]]))
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == set()
    assert fast(project.apply(), project)  # its fingerprint, digest included, was recorded


def test_an_edit_made_while_the_run_ran_is_not_vouched_for(project: Project) -> None:
    """The fingerprint names the bytes the plan was compiled from, not those on disk after the
    run: a pipeline edited during the apply is checked (and here compiled) again."""
    from runner.engine.plan import fastdoc
    from runner.pipeline.compiler import compile_pipeline

    chain(project)
    converge(project)
    path = project.root / "pipeline.yaml"
    plan = compile_pipeline(path)
    path.write_text(path.read_text().replace("cat in1.txt", "cat  in1.txt"))
    sha, digests = fastdoc.of_plan(plan)
    assert sha != hashlib.sha256(path.read_bytes()).hexdigest()
    assert digests != fastdoc.of_bytes(path.read_bytes())


def test_an_output_edit_by_runner_edit_is_used_not_answered_by_the_fingerprint(
    project: Project,
) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          h: {uses: hash, with: {value: one}}
          g: {uses: hash, with: {value: "${{ steps.h.output.short }}"}}
    """,
    )
    first = project.apply()
    age_files(project.root)
    project.apply()
    assert fast(project.apply(), project)
    project.write("fixed.json", '{"canonical": "one", "sha256": "d", "short": "EDITED"}')  # the output's fields
    res = project.cli("edit", first["run"]["id"], "h", "--from", "fixed.json")
    assert res.exit_code == 0, res.stderr
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"g"}
    assert doc["steps"][0]["status"] == "cached"
    age_files(project.root)
    assert not fast(project.apply(), project)  # while the edit is active, the engine answers


def test_gc_that_deletes_results_forgets_the_fingerprints(project: Project) -> None:
    chain(project)
    converge(project)
    assert fast(project.apply(), project)
    res = project.cli("gc", "--keep-last", "0", "--state", ".runner")
    assert res.exit_code == 0, res.stderr
    assert not (project.root / ".runner/converged").exists()
    doc = project.apply()
    assert not fast(doc, project)


def test_bytes_the_check_parsed_are_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.engine.plan import fastdoc
    from runner.source import document as source

    parsed: list[str] = []
    real = source.document_data

    def counted(text: str) -> object:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(source, "document_data", counted)
    monkeypatch.setattr(fastdoc, "_KNOWN", {})
    one, other = b"runner: 1\nname: a # x\n", b"runner: 1\nname: b\n"
    first = fastdoc.of_bytes(one)
    assert fastdoc.of_bytes(one) == first and len(parsed) == 1
    assert fastdoc.of_bytes(other) != first and len(parsed) == 2
    assert first[0] == source.data_digest(real(one.decode()))


def test_the_keyed_digest_leaves_out_only_what_no_key_depends_on() -> None:
    from runner.engine.plan import fastdoc

    base = fastdoc.of_bytes(b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}}\n")
    for neutral in [
        b"runner: 1\nname: a\ndescription: new\nsteps:\n  h: {uses: hash, with: {value: 1}}\n",
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}, retries: 3}\n",
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}, timeout: 5m}\n",
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}, description: x}\n",
    ]:
        digests = fastdoc.of_bytes(neutral)
        assert digests[0] != base[0] and digests[1] == base[1], neutral
    for keyed in [
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 2}}\n",
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}, version: b}\n",
        b"runner: 1\nname: a\nsteps:\n  h: {uses: hash, with: {value: 1}, cache: false}\n",
        b"runner: 1\nname: b\nsteps:\n  h: {uses: hash, with: {value: 1}}\n",
    ]:
        assert fastdoc.of_bytes(keyed)[1] != base[1], keyed


def test_an_edit_of_values_no_key_depends_on_is_compiled_then_answered(project: Project) -> None:
    """A description or retries edit (issue 17 section 5: an edit that changes no key): the
    pipeline is checked against the schema, as its new values must be valid, and the run is
    journaled as cached without compiling or evaluating a key; an invalid value is reported as
    the full path reports it, at its line."""
    chain(project)
    second = converge(project)
    path = project.root / "pipeline.yaml"
    text = path.read_text()
    path.write_text(text.replace("    needs: [s1]\n", "    needs: [s1]\n    retries: 2\n"))
    third = project.apply()
    assert fast(third, project) and ran(third) == set()
    assert [s["key"] for s in third["steps"]] == [s["key"] for s in second["steps"]]
    assert fast(project.apply(), project)  # the new bytes were remembered
    planned = project.cli("plan", "pipeline.yaml", "--json")
    assert planned.exit_code == 0 and '"would_change": false' in planned.stdout
    for invalid, field in [("retries: many", "retries"), ("timeout: soon", "timeout")]:
        path.write_text(re.sub(r"retries: \w+|timeout: \w+", invalid, path.read_text()))
        bad = project.cli("apply", "pipeline.yaml")
        assert bad.exit_code == 2 and "pipeline.yaml:" in bad.stderr and field in bad.stderr
        assert project.cli("plan", "pipeline.yaml").exit_code == 2


def test_an_input_edit_records_its_fingerprint_without_parsing_the_pipeline(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprint that no longer held named the same pipeline bytes: its document digest
    is the one the new fingerprint records (edit-middle: 1,000 steps parsed for nothing)."""
    from runner.engine.plan import fastdoc
    from runner.source import document as source

    chain(project)
    converge(project)
    parsed: list[str] = []
    real = source.document_data
    monkeypatch.setattr(source, "document_data", lambda text: parsed.append(text) or real(text))
    monkeypatch.setattr(fastdoc, "_KNOWN", {})
    project.write("in3.txt", "edited\n")
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"s3", "s4"}
    assert parsed == []
    age_files(project.root)
    project.apply()
    assert fast(project.apply(), project)  # the digest it recorded is the right one


def test_real_paths_of_many_files_equal_realpath(tmp_path: Path) -> None:
    from runner.engine.plan.fastpath import _RealPaths

    (tmp_path / "root/out/sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root/out/a.txt").write_text("a")
    (tmp_path / "elsewhere/b.txt").write_text("b")
    (tmp_path / "root/out/link.txt").symlink_to(tmp_path / "elsewhere/b.txt")
    (tmp_path / "root/out/rel.txt").symlink_to("sub/../a.txt")
    (tmp_path / "root/swapped").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "root/out/dangling").symlink_to(tmp_path / "nowhere/x")
    (tmp_path / "root/out/loop").symlink_to("loop")
    root = str(tmp_path / "root")
    real = _RealPaths()
    for rel in [
        "out/a.txt",
        "out/link.txt",
        "out/rel.txt",
        "swapped/b.txt",
        "out/dangling",
        "out/loop",
        "out/missing.txt",
        "missing/dir/x.txt",
        "out/sub/../a.txt",
        "out/.",
        "out/..",
        "out/",
        "swapped/../out/a.txt",
    ]:
        path = f"{root}/{rel}"
        assert real(path) == os.path.realpath(path), rel
        assert real(path) == os.path.realpath(path), rel  # the remembered directory too


def test_steps_with_rules_are_never_fingerprinted(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          h: {uses: hash, with: {value: 1}, when: {exec: {run: "test -f go"}}}
    """,
    )
    converge(project)
    assert not fast(project.apply(), project)


def test_fast_right_after_a_run_and_racy_rewrites_are_caught(project: Project) -> None:
    chain(project)
    project.apply()  # cold: outputs written moments ago are recorded with their content hash
    assert fast(project.apply(), project)
    # a same-size rewrite that keeps size, mtime and inode (as a racing editor could)
    path = project.root / "in1.txt"
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(b"INPUT 1\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_ino == st.st_ino
    doc = project.apply()
    assert not fast(doc, project)
    assert ran(doc) == {"s1", "s2", "s3", "s4"}


EDITED_WHILE_RUNNING = """\
runner: 1
name: p
steps:
  a:
    uses: shell
    with: {run: "echo one > out/a.txt", outputs: [out/a.txt]}
  b:
    uses: shell
    needs: [a]
    with: {run: "sleep 0.8 && echo two > out/b.txt", outputs: [out/b.txt]}
"""


@pytest.mark.parametrize("edit", ["other size", "same size"])
def test_an_output_edited_by_hand_while_later_steps_ran_is_not_vouched_for(
    project: Project, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    """The fingerprint must not pair the edited file's signature with the digest the run
    stored: the next apply sees the edit, as the full path does (here: a shorter racy window,
    so that the edit lies before it when the run ends)."""
    from runner.engine.plan import fastpath

    monkeypatch.setattr(fastpath, "_RACY_NS", 300_000_000)
    project.write("pipeline.yaml", EDITED_WHILE_RUNNING)
    (project.root / "out").mkdir()
    target = project.root / "out" / "a.txt"
    first = _apply_acting(
        project,
        target.exists,
        lambda: target.write_text("ONE\n" if edit == "same size" else "edited by hand\n"),
    )
    assert ran(first) == {"a", "b"}
    assert not list((project.root / ".runner" / "converged").glob("*.json"))
    second = project.apply()
    assert not fast(second, project)
    assert target.read_text() == "one\n"  # restored; the hand edit is kept in the store
    assert "out/a.txt was edited by hand" in second["_stderr"]
    # with nothing edited since, a later run is answered by the fingerprint again
    age_files(project.root)
    project.apply()
    assert fast(project.apply(), project)


def test_an_object_damaged_while_later_steps_ran_is_not_vouched_for(project: Project) -> None:
    """An object the run verified, damaged before the fingerprint is written, is not recorded
    with its new signature: the next apply hashes it, sets it aside and makes it again."""
    project.write("pipeline.yaml", EDITED_WHILE_RUNNING)
    (project.root / "out").mkdir()
    digest = hashlib.sha256(b"one\n").hexdigest()
    obj = project.root / ".runner" / "objects" / digest[:2] / digest[2:]

    def damage() -> None:
        obj.chmod(0o644)
        obj.write_bytes(b"two\n")  # the same size: only the hash tells

    first = _apply_acting(project, obj.exists, damage)
    assert ran(first) == {"a", "b"}
    assert not list((project.root / ".runner" / "converged").glob("*.json"))
    second = project.apply()
    assert not fast(second, project)
    assert obj.read_bytes() == b"one\n"  # made again from the workspace's file
    assert project.cli("verify", "--state", ".runner").exit_code == 0


GLOB_THEN_SLOW = """\
runner: 1
name: p
steps:
  files: {uses: read, with: {path: "docs/*.md", as: paths}}
  slow:
    uses: shell
    needs: [files]
    with: {run: "sleep 0.8 && echo done > out/slow.txt", outputs: [out/slow.txt]}
"""


def _apply_acting(
    project: Project, ready: Callable[[], bool], act: Callable[[], object], settle: float = 0.05
) -> dict:
    """Apply, doing ``act`` in another thread once ``ready()`` holds (and ``settle`` s more)."""
    import threading

    def watch() -> None:
        deadline = time.monotonic() + 10
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(settle)
        act()

    actor = threading.Thread(target=watch)
    actor.start()
    try:
        return project.apply()
    finally:
        actor.join()


def _while_running(project: Project, act: Callable[[], object]) -> dict:
    """Apply, doing ``act`` once the slow step has started."""

    def started() -> bool:
        return bool(list(project.root.glob(".runner/journal.db*")))

    return _apply_acting(project, started, act, settle=0.3)


def test_a_file_a_glob_matches_added_while_the_run_ran_is_not_vouched_for(
    project: Project,
) -> None:
    """The fingerprint records a glob's matches as the run read them: a file added after the
    read step read the glob makes the next apply read it, as the full path does."""
    project.write("pipeline.yaml", GLOB_THEN_SLOW)
    project.write("docs/a.md", "alpha\n")
    (project.root / "out").mkdir()
    first = _while_running(project, lambda: project.write("docs/b.md", "beta\n"))
    assert ran(first) == {"files", "slow"}
    second = project.apply()
    assert not fast(second, project) and "files" in ran(second)


def test_a_config_file_edited_while_the_run_ran_is_not_vouched_for(project: Project) -> None:
    """runner.toml may be read before the edit: the fingerprint does not name its new
    signature, so the next apply reads it again."""
    project.write("pipeline.yaml", GLOB_THEN_SLOW)
    project.write("docs/a.md", "alpha\n")
    (project.root / "out").mkdir()
    age_files(project.root)
    first = _while_running(
        project, lambda: project.write("runner.toml", '[providers.fake]\ntype = "fake"\n')
    )
    assert ran(first) == {"files", "slow"}
    assert not list((project.root / ".runner" / "converged").glob("*.json"))
    assert not fast(project.apply(), project)


GLOB_LLM = """\
runner: 1
name: p
params:
  docs: {type: string, default: "docs/*.md"}
steps:
  files: {uses: read, with: {path: "${{ params.docs }}"}}
  sum:
    uses: llm
    for_each: "${{ steps.files.output.files }}"
    with: {prompt: "Summarise: ${{ item.text }}"}
    check:
      - "${{ output.text | length > 0 }}"
"""


def test_an_llm_pipeline_reading_a_glob_takes_the_fast_path(project: Project) -> None:
    """llm steps (their provider profile comes from runner.toml, which the fingerprint checks),
    checks (they run only after an execution) and a glob read decided by params (its matches are
    recorded): a no-op is answered without compiling, and each change falls through."""
    project.write("pipeline.yaml", GLOB_LLM)
    project.write("docs/a.md", "alpha\n")
    project.write("docs/b.md", "beta\n")
    converge(project)
    assert fast(project.apply(), project)
    planned = project.cli("plan", "pipeline.yaml", "--json")
    assert planned.exit_code == 0 and '"would_change": false' in planned.stdout
    # a new file the glob matches (a hostile name and text: data, never code): a new element
    hostile = "docs/c $HOME 'q' `x` <script>.md"
    project.write(hostile, "gamma ${{ run.id }} $(touch pwned)\n")
    doc = project.apply()
    assert not fast(doc, project) and ran(doc) == {"files", "sum"}
    assert doc["steps"][1]["elements"] == {"total": 3, "ran": 1, "cached": 2}
    assert not (project.root / "pwned").exists()
    age_files(project.root)
    project.apply()
    assert fast(project.apply(), project)
    # a file gone: the glob's matches differ
    (project.root / hostile).unlink()
    doc = project.apply()
    assert not fast(doc, project) and doc["steps"][1]["elements"]["total"] == 2
    age_files(project.root)
    project.apply()
    assert fast(project.apply(), project)
    # the provider's settings: another profile, every call made again
    project.write("runner.toml", '[providers.fake]\ntype = "fake"\nmodel = "other"\n')
    doc = project.apply()
    assert not fast(doc, project) and doc["steps"][1]["elements"] == {"total": 2, "ran": 2}


def test_a_read_path_from_another_steps_output_keeps_the_full_path(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          name: {uses: hash, with: {value: a}}
          files: {uses: read, with: {path: "docs/${{ steps.name.output.short }}*.md"}}
    """,
    )
    project.write("docs/x.md", "x\n")
    converge(project)
    assert not fast(project.apply(), project)


def test_a_no_op_journals_each_element_so_gc_keeps_their_results(project: Project) -> None:
    """The no-op's rows name every for_each element's key, as the full path's do: `runs show`
    reads the same, and gc, which keeps a result while a kept run names its key, keeps the
    elements' results when only no-op runs are kept (it deleted them, and the next apply ran
    every element again)."""
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        params:
          items: {type: array, default: [a, b, c]}
        steps:
          h: {uses: hash, for_each: "${{ params.items }}", with: {value: "${{ item }}"}}
          g: {uses: hash, with: {value: "${{ steps.h.output | length }}"}}
    """,
    )
    full = converge(project)
    noop = project.apply()
    assert fast(noop, project)
    db = project.root / ".runner/journal.db"

    def rows(run: str) -> list[tuple[str, int, str]]:
        with sqlite3.connect(db) as conn:  # a no-op's, or the no-op's it repeats (repeats.py)
            return conn.execute(
                "SELECT step_id, element, key FROM executions WHERE run_id="
                "(SELECT COALESCE(repeats, id) FROM runs WHERE id=?) ORDER BY step_id, element",
                (run,),
            ).fetchall()

    assert rows(noop["run"]["id"]) == rows(full["run"]["id"])
    assert len(rows(noop["run"]["id"])) == 4
    assert project.cli("gc", "--keep-last", "1", "--state", ".runner").exit_code == 0
    planned = project.cli("plan", "pipeline.yaml", "--json")
    assert '"would_change": false' in planned.stdout
    assert ran(project.apply()) == set()


def test_a_no_op_runs_records_read_as_the_full_paths(project: Project) -> None:
    """`runs show` gives a no-op's cached executions the outputs of the results they stand
    for, as it does a full-path run's, and `runner edit` takes a no-op run's id (the one the
    apply printed): it refused, "no stored output to edit"."""
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          h: {uses: hash, with: {value: one}}
          g: {uses: hash, with: {value: "${{ steps.h.output.short }}"}}
    """,
    )
    full = converge(project)
    noop = project.apply()
    assert fast(noop, project)

    def outputs(run: str) -> list[tuple[str, object]]:
        return [(e["step_id"], e["output"]) for e in shown(project, run)["executions"]]

    assert outputs(noop["run"]["id"]) == outputs(full["run"]["id"])
    assert all(output is not None for _, output in outputs(noop["run"]["id"]))
    project.write("fixed.json", '{"canonical": "one", "sha256": "d", "short": "EDITED"}')  # the output's fields
    res = project.cli("edit", noop["run"]["id"], "h", "--from", "fixed.json")
    assert res.exit_code == 0, res.stderr
    doc = project.apply()
    assert ran(doc) == {"g"} and doc["steps"][0]["status"] == "cached"


def test_verify_sees_an_element_output_edited_after_a_no_op(project: Project) -> None:
    """`runner verify` checks the outputs of each pipeline's latest run: after a no-op, that run's
    element rows carry their keys, so an element's output edited by hand is reported. The
    second element is a hostile value: it reaches the shell, a file name and the journal as
    data."""
    hostile = "b'$(touch pwned)`touch pwned2`;\"x"
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        params:
          items: {type: array, default: [a, "b'$(touch pwned)`touch pwned2`;\\"x"]}
        steps:
          w:
            uses: shell
            for_each: "${{ params.items }}"
            with: {run: "echo ${{ item }} > out/${{ item }}.txt", outputs: ["out/${{ item }}.txt"]}
    """,
    )
    (project.root / "out").mkdir()
    converge(project)
    assert fast(project.apply(), project)
    assert project.cli("verify", "--state", ".runner").exit_code == 0
    output = project.root / "out" / f"{hostile}.txt"
    assert output.read_text() == f"{hostile}\n"
    assert not (project.root / "pwned").exists() and not (project.root / "pwned2").exists()
    output.write_text("edited by hand\n")
    res = project.cli("verify", "--state", ".runner")
    assert res.exit_code != 0 and "touch pwned2" in res.stdout + res.stderr


def test_a_run_that_did_work_leaves_the_fingerprint_the_next_no_op_needs(
    project: Project,
) -> None:
    # Issue 43: a step that re-runs has its old output hashed first (kept if edited by hand);
    # that hash of bytes about to be rewritten must not be what the fingerprint checks, or the
    # last step's output (read by no later step) holds a stale signature and the first no-op
    # after every edit takes the full path.
    chain(project)
    converge(project)
    project.write("in1.txt", "edited\n")
    worked = project.apply()
    assert ran(worked) == {"s1", "s2", "s3", "s4"}
    after = project.apply()
    assert fast(after, project)
    assert after["summary"] == {"ran": 0, "cached": 4, "skipped": 0, "failed": 0}
    assert [s["key"] for s in after["steps"]] == [s["key"] for s in worked["steps"]]
