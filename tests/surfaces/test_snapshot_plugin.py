"""The pytest plugin end to end: a throwaway user project, pytest run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

PIPELINE = """\
runner: 1
name: demo
params:
  who: {type: string, default: world}
steps:
  prompt:
    uses: template
    with:
      template: prompts/hello.j2
      vars: {who: "${{ params.who }}"}
  ask:
    uses: llm
    with:
      system: Answer in one line.
      prompt: "${{ steps.prompt.output.text }}"
    check: ["${{ steps.ask.output.text | length > 0 }}"]
tests:
  small:
    params: {who: tiny}
"""

HAND_WRITTEN = """\
def test_hand_written(runner_render):
    texts = runner_render("pipelines/demo.yaml", fixture="small")
    assert texts["prompt"].endswith(" tiny\\n")
    assert runner_render("pipelines/demo.yaml", params={"who": "x"})["prompt"].endswith(" x\\n")
"""


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def make_project(root: Path) -> None:
    write(
        root,
        "pytest.ini",
        "[pytest]\ntestpaths = tests\nrunner_pipelines = pipelines\nrunner_snapshot_dir = snaps\n",
    )
    write(root, "pipelines/demo.yaml", PIPELINE)
    write(root, "pipelines/prompts/hello.j2", "Hello {{ who }}\n")
    write(root, "pipelines/notes.yaml", "not: a pipeline\n")  # ignored: no `runner: 1`
    write(root, "tests/test_hand.py", HAND_WRITTEN)


def pytest_run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNNER_"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the plugins named below (fast start)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "syrupy",
        "-p",
        "runner.surfaces.testing.plugin",
        "-p",
        "no:cacheprovider",
        "-rf",
        *args,
    ]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_snapshot_lifecycle_in_a_user_project(tmp_path: Path) -> None:
    make_project(tmp_path)
    snaps = tmp_path / "snaps" / "pipelines" / "demo" / "small"

    first = pytest_run(tmp_path)
    assert first.returncode == 1, first.stdout
    assert "demo.yaml [small]" in first.stdout
    assert "Snapshot 'prompt' does not exist!" in first.stdout
    assert "1 failed, 1 passed" in first.stdout  # the hand-written test passes
    assert not (tmp_path / "snaps").exists()  # a plain run never creates snapshots

    update = pytest_run(tmp_path, "--snapshot-update")
    assert update.returncode == 0, update.stdout
    assert sorted(p.name for p in snaps.iterdir()) == ["ask.txt", "prompt.txt"]
    assert (snaps / "prompt.txt").read_text(encoding="utf-8") == "Hello tiny\n"
    assert (snaps / "ask.txt").read_text(encoding="utf-8") == (
        "--- system ---\nAnswer in one line.\n--- user ---\nHello tiny\n"
    )

    again = pytest_run(tmp_path, "-v")  # the next plain run passes
    assert again.returncode == 0, again.stdout
    assert "pipelines/demo.yaml::small PASSED" in again.stdout

    # Edit the template and rename a step: the diff names the step; the stale snapshot of the
    # old step is reported, then removed by --snapshot-update.
    write(tmp_path, "pipelines/prompts/hello.j2", "Howdy {{ who }}\n")
    renamed = PIPELINE.replace("  ask:", "  question:").replace("steps.ask.", "steps.question.")
    write(tmp_path, "pipelines/demo.yaml", renamed)
    edited = pytest_run(tmp_path)
    assert edited.returncode == 1
    out = edited.stdout
    assert "step 'prompt' (snaps/pipelines/demo/small/prompt.txt):" in out
    assert "- Hello tiny" in out and "+ Howdy tiny" in out
    assert "Snapshot 'question' does not exist!" in out
    assert "step 'ask'" in out and "renders no prompt any more" in out
    assert "Traceback" not in out
    assert pytest_run(tmp_path, "--snapshot-update").returncode == 0
    assert sorted(p.name for p in snaps.iterdir()) == ["prompt.txt", "question.txt"]

    (tmp_path / "tests" / "test_hand.py").unlink()  # it would fail (with a traceback) too
    write(tmp_path, "pipelines/demo.yaml", PIPELINE.replace("uses: template", "uses: templat"))
    invalid = pytest_run(tmp_path)
    assert invalid.returncode == 1
    assert "pipelines/demo.yaml:7:11: step 'prompt': unknown step type 'templat'" in invalid.stdout
    assert "did you mean 'template'?" in invalid.stdout
    assert "Traceback" not in invalid.stdout and "runner/engine/plan/render.py" not in invalid.stdout

    assert not (tmp_path / "pipelines" / ".runner").exists()
    assert not (tmp_path / ".runner").exists()


def test_command_line_option_and_default_case(tmp_path: Path) -> None:
    # No ini option: --runner-pipelines names the directory; a pipeline without `tests:` gets one
    # case with its default params; snapshots land where the README says:
    # tests/__snapshots__/<pipeline file without .yaml>/<fixture>/<step>.txt.
    write(tmp_path, "pytest.ini", "[pytest]\n")
    write(
        tmp_path,
        "pipelines/plain.yaml",
        """\
        runner: 1
        name: plain
        steps:
          p: {uses: template, with: {text: "static prompt"}}
        """,
    )
    update = pytest_run(tmp_path, "--runner-pipelines", "pipelines", "--snapshot-update", "-v")
    assert update.returncode == 0, update.stdout
    assert "pipelines/plain.yaml::default PASSED" in update.stdout
    snapshot = tmp_path / "tests" / "__snapshots__" / "pipelines" / "plain" / "default"
    assert not (tmp_path / "tests" / "__snapshots__" / "pipelines" / "pipelines").exists()
    assert (snapshot / "p.txt").read_text(encoding="utf-8") == "static prompt"
