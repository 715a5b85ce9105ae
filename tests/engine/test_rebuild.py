"""`runner verify --rebuild`: cached executions run again in a scratch copy and compared.

Real applies, a real journal and object store, real shell commands; the real state is
snapshotted before and after each rebuild and must not change.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from runner.state.migrations import TABLES
from tests.conftest import REPO, Project, runner_bin
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Recorded, Reply, b64, png

SHIPPED = ("report", "classify-ingest", "scene-detail", "thumbnail")
PAID_STEPS = {  # each shipped pipeline's provider steps
    "report": {"draft"},
    "classify-ingest": {"classify"},
    "scene-detail": {"detail"},
    "thumbnail": {"generate"},
}


def snapshot(root: Path) -> dict[str, Any]:
    """Everything a rebuild must leave alone: every journal row, the objects, every file of
    the project and its state (content and mtime)."""
    state = root / ".runner"
    conn = sqlite3.connect(state / "journal.db")
    try:
        rows = {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}
    finally:
        conn.close()
    objects = sorted(
        str(p.relative_to(state / "objects"))
        for p in (state / "objects").rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    files = {}
    for path in sorted(root.rglob("*")):
        # Every file, the state's too (fingerprints, run folders, logs, locks), but SQLite's
        # own files, compared above by their rows.
        if path.is_file() and not path.name.startswith("journal.db"):
            st = path.stat()
            files[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                st.st_mtime_ns,
            )
    return {"rows": rows, "objects": objects, "files": files}


def rebuild(project: Project, *args: str) -> tuple[int, dict[str, Any]]:
    res = project.cli("verify", "--rebuild", "--state", ".runner", "--json", *args)
    assert res.stdout, res.stderr
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == res.exit_code
    return res.exit_code, doc


def verdicts(doc: dict[str, Any]) -> dict[str, str]:
    """step or step[element] -> verdict."""
    out = {}
    for c in doc["checks"]:
        label = c["step"] + (f"[{c['element']}]" if c["element"] is not None else "")
        out[label] = c["verdict"]
    return out


@pytest.fixture
def shipped(project: Project) -> Project:
    for folder in ("pipelines", "prompts", "examples", "cards"):
        shutil.copytree(
            REPO / folder, project.root / folder, ignore=shutil.ignore_patterns(".runner", "out")
        )
    for name in ("runner.toml", "prompts.lock"):
        shutil.copy(REPO / name, project.root / name)
    return project


def apply_to_completion(project: Project, pipeline: str) -> str:
    """Apply a shipped pipeline; approve its review gate when it has one. The run id."""
    doc = project.apply("--state", ".runner", file=f"pipelines/{pipeline}.yaml")
    run_id: str = doc["run"]["id"]
    if doc["_exit"] == 7:
        res = project.cli("decide", run_id, "review", "approve", "--state", ".runner")
        assert res.exit_code == 0, res.stderr
    else:
        assert doc["_exit"] == 0, doc
    return run_id


@pytest.mark.parametrize("pipeline", SHIPPED)
def test_shipped_pipeline_rebuilds_the_same(shipped: Project, pipeline: str) -> None:
    run_id = apply_to_completion(shipped, pipeline)
    before = snapshot(shipped.root)

    code, doc = rebuild(shipped, "--all")
    assert code == 0 and doc["ok"], doc
    assert [r["id"] for r in doc["runs"]] == [run_id]
    found = verdicts(doc)
    same = {k for k, v in found.items() if v == "same"}
    assert same, doc  # every shipped pipeline has deterministic steps, and they were re-run
    assert set(found.values()) <= {"same", "skipped"}
    paid = [c for c in doc["checks"] if c["step"] in PAID_STEPS[pipeline]]
    assert paid and all(
        c["verdict"] == "skipped" and "--include-paid" in c["reason"] for c in paid
    ), paid
    assert doc["summary"]["not_sampled"] == 0
    assert snapshot(shipped.root) == before

    # The fake provider is deterministic: re-paid calls agree with the recorded ones.
    code, doc = rebuild(shipped, "--all", "--include-paid")
    assert code == 0 and doc["ok"], doc
    paid = [c for c in doc["checks"] if c["step"] in PAID_STEPS[pipeline]]
    assert paid and all(c["verdict"] == "same" for c in paid), paid
    assert snapshot(shipped.root) == before


CLOCK = """\
runner: 1
name: clock
steps:
  stamp:
    uses: shell
    with:
      run: mkdir -p out && date +%s%N > out/stamp.txt
      outputs: [out/stamp.txt]
  copy:
    uses: shell
    with:
      run: cp out/stamp.txt out/copy.txt
      inputs: [out/stamp.txt]
      outputs: [out/copy.txt]
  steady:
    uses: shell
    with:
      run: mkdir -p out && echo steady > out/steady.txt
      outputs: [out/steady.txt]
  noise:
    uses: shell
    for_each: ["a", "b"]
    with:
      run: echo ${{ item }} && head -c 8 /dev/urandom | od -An -tx1
"""


def test_a_nondeterministic_shell_step_is_found_and_named(project: Project) -> None:
    project.write("pipeline.yaml", CLOCK)
    assert project.apply("--state", ".runner")["_exit"] == 0
    before = snapshot(project.root)

    code, doc = rebuild(project, "--all")
    assert code == 1 and not doc["ok"]
    found = verdicts(doc)
    # `copy` reads stamp's output: it is given the recorded one, so it rebuilds the same
    assert found == {
        "stamp": "differs",
        "copy": "same",
        "steady": "same",
        "noise[0]": "differs",
        "noise[1]": "differs",
    }
    stamp = next(c for c in doc["checks"] if c["step"] == "stamp")
    (diff,) = stamp["differences"]
    recorded = (before["files"]["out/stamp.txt"])[0]
    assert diff["what"] == "file out/stamp.txt" and diff["recorded"] == recorded
    assert diff["rebuilt"] != recorded and diff["hint"].startswith("-")
    noise = next(c for c in doc["checks"] if c["step"] == "noise" and c["element"] == 1)
    assert [d["what"] for d in noise["differences"]] == ["output.stdout"]
    assert snapshot(project.root) == before

    # Its text form names the step and says what differs, and the exit code says it.
    res = project.cli("verify", "--rebuild", "--all", "--state", ".runner")
    assert res.exit_code == 1
    assert "not deterministic: run " in res.stdout and "step stamp (shell)" in res.stdout
    assert f"file out/stamp.txt: recorded {recorded[:12]}" in res.stdout
    assert "step noise[1] (shell)" in res.stdout
    assert "FAILED: 2 rebuilt the same, 3 differ" in res.stdout
    assert snapshot(project.root) == before


def test_rebuild_in_a_real_process_leaves_no_scratch_behind(project: Project) -> None:
    project.write("pipeline.yaml", CLOCK)
    assert project.apply("--state", ".runner")["_exit"] == 0
    before = snapshot(project.root)
    tmp = project.root.parent / "scratch-tmp"
    tmp.mkdir()
    done = subprocess.run(
        [*runner_bin(), "verify", "--rebuild", "--all", "--state", ".runner"],
        cwd=project.root,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "not deterministic" in done.stdout and "step stamp" in done.stdout, done
    assert "rebuild 5/5: done" in done.stderr  # progress, on stderr
    assert list(tmp.iterdir()) == []  # the scratch copy is gone
    assert snapshot(project.root) == before


def test_each_step_is_checked_against_its_recorded_inputs(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: chain
        steps:
          first:
            uses: shell
            with:
              run: mkdir -p out && cat src.txt > out/a.txt
              inputs: [src.txt]
              outputs: [out/a.txt]
          second:
            uses: shell
            with:
              run: tr a-z A-Z < out/a.txt > out/b.txt
              inputs: [out/a.txt]
              outputs: [out/b.txt]
        """,
    )
    project.write("src.txt", "hello\n")
    assert project.apply("--state", ".runner")["_exit"] == 0
    noop = project.apply("--state", ".runner")  # the latest run reuses everything
    assert noop["_exit"] == 0 and noop["summary"]["ran"] == 0
    # An output edited by hand: the rebuild gives `second` the recorded out/a.txt, and leaves
    # the edit where it is.
    (project.root / "out/a.txt").write_text("edited by hand\n")
    before = snapshot(project.root)
    code, doc = rebuild(project, "--all")
    assert code == 0 and verdicts(doc) == {"first": "same", "second": "same"}, doc
    assert [r["id"] for r in doc["runs"]] == [noop["run"]["id"]]
    assert snapshot(project.root) == before
    assert (project.root / "out/a.txt").read_text() == "edited by hand\n"

    # A source changed since the run: the key is no longer the recorded one, so there is
    # nothing recorded to compare with; skipped and said why, not reported as a difference.
    (project.root / "src.txt").write_text("changed\n")
    code, doc = rebuild(project, "--all")
    assert code == 0 and verdicts(doc) == {"first": "skipped", "second": "same"}, doc
    first = next(c for c in doc["checks"] if c["step"] == "first")
    assert "project changed since the run" in first["reason"]


def test_sample_run_and_usage_errors(project: Project) -> None:
    project.write("pipeline.yaml", CLOCK)
    run_id = project.apply("--state", ".runner")["run"]["id"]
    code, doc = rebuild(project, "--sample", "2", "--run", run_id[:10])
    assert len(doc["checks"]) == 2 and doc["summary"]["not_sampled"] == 3
    assert code == (1 if "differs" in verdicts(doc).values() else 0)

    res = project.cli("verify", "--rebuild", "--run", "nosuchrun", "--state", ".runner")
    assert res.exit_code == 3 and "unknown run" in res.stderr
    res = project.cli("verify", "--rebuild", "--sample", "0", "--state", ".runner")
    assert res.exit_code == 2 and "--sample" in res.stderr
    res = project.cli("verify", "--all", "--state", ".runner")
    assert res.exit_code == 2 and "--rebuild" in res.stderr
    res = project.cli("verify", "--rebuild", "--repair", "--state", ".runner")
    assert res.exit_code == 2


def test_a_command_writing_through_an_absolute_link_writes_into_the_copy(
    project: Project,
) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: linked
        steps:
          log:
            uses: shell
            with:
              run: echo once >> data/log.txt && mkdir -p out && echo ok > out/ok.txt
              outputs: [out/ok.txt, data/log.txt]
        """,
    )
    (project.root / "real").mkdir()
    (project.root / "data").symlink_to(project.root.resolve() / "real")
    assert project.apply("--state", ".runner")["_exit"] == 0
    assert (project.root / "real/log.txt").read_text() == "once\n"
    before = snapshot(project.root)
    code, doc = rebuild(project, "--all")
    assert code == 0 and verdicts(doc) == {"log": "same"}, doc
    assert (project.root / "real/log.txt").read_text() == "once\n"
    assert snapshot(project.root) == before


def test_an_image_answered_by_the_call_ledger_rebuilds_the_same(shipped: Project) -> None:
    """An image the call ledger answered (its execution's report says so) rebuilds the same."""
    first = shipped.apply("--state", ".runner", "-p", "n=2", file="pipelines/thumbnail.yaml")
    assert first["_exit"] == 0, first
    again = shipped.apply(
        "--state", ".runner", "-p", "n=2", "--force", "generate", file="pipelines/thumbnail.yaml"
    )
    assert again["_exit"] == 0 and "generate" in {s["id"] for s in again["steps"]}
    conn = sqlite3.connect(shipped.root / ".runner" / "journal.db")
    (output, report) = conn.execute(
        "SELECT output, report FROM executions WHERE run_id=? AND step_id='generate'",
        (again["run"]["id"],),
    ).fetchone()
    conn.close()
    reused = json.loads(report)["reused_calls"]
    assert reused == [it["idempotency_key"] for it in json.loads(output)["iterations"]]
    code, doc = rebuild(shipped, "--all", "--include-paid")
    assert code == 0 and verdicts(doc)["generate"] == "same", doc


def test_which_step_types_pay() -> None:
    from runner.engine.run.rebuild import calls_provider
    from runner.steps.base import StepType
    from runner.steps.registry import BUILTINS, default_registry

    registry = default_registry()
    paid = {name for name in BUILTINS if calls_provider(name, registry.get(name))}
    assert paid == {"llm", "image"}

    class Plugin(StepType):
        name = "plugin"

    class LocalPlugin(StepType):
        name = "local"
        runs_anywhere = True

    class Declared(StepType):
        name = "declared"
        runs_anywhere = True
        calls_provider = True

    # A third-party type that does not say it needs nothing but its arguments may pay.
    assert calls_provider("plugin", Plugin())
    assert not calls_provider("local", LocalPlugin())
    assert calls_provider("declared", Declared())


def test_parts_of_a_project_in_no_one_folder_are_not_copied(tmp_path: Path) -> None:
    """The pipeline in one folder, its root in a sibling: their common parent is no project
    folder (it may be /tmp, or a home), so nothing is copied and the check says why."""
    project = Project(tmp_path / "pipes")
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: apart
        root: ../work
        steps:
          hello:
            uses: shell
            with:
              run: echo hello > hello.txt
              outputs: [hello.txt]
        """,
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "bystander.bin").write_bytes(b"not part of the project")
    assert project.apply("--state", ".runner")["_exit"] == 0
    before = snapshot(project.root)
    code, doc = rebuild(project, "--all")
    assert code == 1 and verdicts(doc) == {"hello": "failed"}, doc
    assert "no one project folder" in doc["checks"][0]["reason"]
    assert snapshot(project.root) == before


class SeedlessServer(OpenAIServer):
    """An image backend that ignores what it is asked for beyond the size: each call gives a
    new random colour."""

    def _generate(self, rec: Recorded) -> Reply:
        reply = super()._generate(rec)
        with Image.open(io.BytesIO(base64.b64decode(reply.body["data"][0]["b64_json"]))) as im:
            size = im.size
        colour = tuple(secrets.token_bytes(3))
        reply.body["data"][0]["b64_json"] = b64(png(colour, size))  # type: ignore[arg-type]
        return reply


def test_a_provider_that_ignores_its_seed_is_found_when_paid_for(project: Project) -> None:
    shutil.copytree(REPO / "prompts" / "thumbnail", project.root / "prompts" / "thumbnail")
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", project.root / "pipeline.yaml")
    project.write("pipeline.yaml", (project.root / "pipeline.yaml").read_text().replace(
        "root: ..", "root: ."
    ))  # fmt: skip
    small = ("-p", "n=2", "-p", "concurrency=1", "-p", "size=640x360")
    with SeedlessServer() as server:
        project.write(
            "runner.toml",
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{server.url}/v1"
            timeout = 10
            """,
        )
        with_env = {"OPENAI_API_KEY": "sk-test"}
        res = project.cli(
            "apply", "pipeline.yaml", "--state", ".runner", "-q", *small, env=with_env
        )
        assert res.exit_code == 0, res.stderr
        before = snapshot(project.root)
        res = project.cli("verify", "--rebuild", "--all", "--state", ".runner", "--json")
        assert res.exit_code == 0 and verdicts(json.loads(res.stdout))["generate"] == "skipped"
        paid_before = len(server.requests)
        res = project.cli(
            "verify", "--rebuild", "--all", "--include-paid", "--state", ".runner", "--json",
            env=with_env,
        )  # fmt: skip
        doc = json.loads(res.stdout)
        assert len(server.requests) == paid_before + 2  # it did pay: two images again
    assert res.exit_code == 1 and verdicts(doc) == {
        "prompt": "same",
        "generate": "differs",
        "final": "same",  # finalised from the recorded images
    }, doc
    generate = next(c for c in doc["checks"] if c["step"] == "generate")
    assert {d["what"] for d in generate["differences"]} == {
        "output.iterations[0].raw",
        "output.iterations[1].raw",
    }
    assert snapshot(project.root) == before


def test_a_revised_draft_is_rebuilt_with_its_reviewer_input(shipped: Project) -> None:
    """A revision's feedback is part of the draft's key and prompt: the rebuild gives it back,
    so the revised draft is checked (not skipped as changed) and agrees."""
    doc = shipped.apply("--state", ".runner", file="pipelines/report.yaml")
    run_id = doc["run"]["id"]
    res = shipped.cli(
        "decide",
        run_id,
        "review",
        "revise",
        "--input",
        "feedback=churn first",
        "--state",
        ".runner",
    )
    assert res.exit_code == 7, res.stderr
    res = shipped.cli("decide", run_id, "review", "approve", "--state", ".runner")
    assert res.exit_code == 0, res.stderr
    code, doc = rebuild(shipped, "--all", "--include-paid")
    assert code == 0 and verdicts(doc) == {
        "gather": "same",
        "prompt": "same",
        "draft": "same",
        "review": "skipped",
        "publish": "same",
    }, doc
