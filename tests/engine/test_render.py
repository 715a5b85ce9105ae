"""`runner render` and runner.engine.plan.render: prompts rendered offline, deterministic, in scratch space."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.engine.plan.render import RenderError, render_pipeline
from runner.errors import InvalidPipeline, UsageError
from tests.conftest import Project

PIPELINE = """\
runner: 1
name: demo
params:
  title: {type: string, default: hello}
  loud: {type: boolean, default: false}
steps:
  greet:
    uses: shell
    with:
      run: "printf '%s' '${{ params.title }}' > out/greet.txt; cat out/greet.txt"
      outputs: [out/greet.txt]
  draft:
    uses: llm
    with:
      provider: openai
      prompt: "Write a tagline for ${{ params.title }}"
    check: ["${{ steps.draft.output.text | length > 0 }}"]
  prompt:
    uses: template
    with:
      template: prompts/hello.j2
      vars:
        title: "${{ params.title }}"
        greeting: "${{ steps.greet.output.stdout }}"
        run_id: "${{ run.id }}"
        tagline_chars: "${{ steps.draft.output.text | length > 0 }}"
  shout:
    uses: template
    when: "${{ params.loud }}"
    with: {text: "{{ t | upper }}", vars: {t: "${{ params.title }}"}}
  ask:
    uses: llm
    with:
      system: You are terse.
      prompt: "Improve: ${{ steps.prompt.output.text }}"
      schema: {type: object, required: [text]}
    check: ["${{ steps.ask.output.json.text | length > 0 }}"]
tests:
  small:
    params: {title: tiny}
  loud:
    params: {title: big, loud: true}
"""

TEMPLATE = (
    "Title: {{ title }}\nGreeting: {{ greeting }}\nRun: {{ run_id }}\n"
    "Tagline: {{ tagline_chars }}\n"
)


def make(project: Project, pipeline: str = PIPELINE) -> Path:
    project.write("prompts/hello.j2", TEMPLATE)
    project.write("out/.keep", "")
    return project.write("pipeline.yaml", pipeline)


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_renders_templates_and_llm_messages_without_calling_the_llm(project: Project) -> None:
    path = make(project)
    before = tree(project.root)
    result = render_pipeline(path, fixture="small")
    texts = result.texts()
    assert list(texts) == ["draft", "shout", "prompt", "ask"]  # plan order, prompt steps only
    # `draft` names a paid provider: it ran on fake for `prompt`, and renders as its messages.
    assert texts["draft"] == "--- user ---\nWrite a tagline for tiny\n"
    assert texts["prompt"] == "Title: tiny\nGreeting: tiny\nRun: render\nTagline: True\n"
    assert texts["ask"] == (
        "--- system ---\nYou are terse.\n"
        "--- user ---\nImprove: Title: tiny\nGreeting: tiny\nRun: render\nTagline: True\n"
        '--- reply schema ---\n{\n  "required": [\n    "text"\n  ],\n  "type": "object"\n}\n'
    )
    shout = result.renders[1]
    assert shout.skipped and shout.text.startswith("(skipped: when")
    # The shell step ran in a scratch copy; the user's tree (and .runner) is untouched.
    assert tree(project.root) == before
    assert not (project.root / ".runner").exists()


def test_fixture_params_apply_and_cli_overrides_win(project: Project) -> None:
    path = make(project)
    loud = render_pipeline(path, fixture="loud").texts()
    assert loud["shout"] == "BIG"
    again = render_pipeline(path, fixture="loud", overrides={"title": "x"}).texts()
    assert again["shout"] == "X"
    typed = render_pipeline(path, params={"title": "123", "loud": True}).texts()
    assert typed["shout"] == "123"


def test_fixture_files_are_written_into_a_scratch_copy(project: Project) -> None:
    path = make(
        project,
        """\
        runner: 1
        name: files
        steps:
          cat:
            uses: shell
            with: {run: "cat notes/input.txt", inputs: [notes/input.txt]}
          prompt:
            uses: template
            with: {text: "Notes: {{ n }}", vars: {n: "${{ steps.cat.output.stdout }}"}}
        tests:
          one:
            files: {notes/input.txt: "from the fixture"}
          bad:
            files: {../escape.txt: "no"}
        """,
    )
    assert render_pipeline(path, fixture="one").texts() == {"prompt": "Notes: from the fixture"}
    assert not (project.root / "notes").exists()
    with pytest.raises(InvalidPipeline) as ei:
        render_pipeline(path, fixture="bad")
    assert ei.value.where is not None and (ei.value.where.line, ei.value.where.column) == (14, 13)
    assert "runner-render" not in str(ei.value)  # names the user's root, not the scratch copy
    assert not (project.root.parent / "escape.txt").exists()


def test_card_and_for_each_renders(project: Project) -> None:
    project.write(
        "cards/demo.yaml",
        """\
        title: DemoCard
        schema_version: 2
        key:
          item_key:
            id: {type: int, value: "${{ item_id }}"}
        inputs:
          item_id: {type: int, required: true}
          label: {type: string, required: false}
        patterns:
          close: {regex: 'close', ignore_case: true}
        fields:
          main:
            scale:
              type: enum
              allowed: [close, medium]
              rules:
                - when: {matches: {value: "${{ label }}", pattern: close}}
                  value: close
                - else: medium
        """,
    )
    path = make(
        project,
        """\
        runner: 1
        name: cards
        steps:
          card:
            uses: card
            with: {spec: cards/demo.yaml, inputs: {item_id: 7, label: Close-up}}
          shots:
            uses: template
            for_each: "${{ ['a', 'b'] }}"
            with: {text: "shot {{ s }}", vars: {s: "${{ item }}"}}
        """,
    )
    texts = render_pipeline(path).texts()
    assert texts["card"] == (
        '[DemoCard v2]\n{"item_key":{"id":7},"main":{"scale":"close"},"schema_version":2}\n\n'
    )
    # an element is named by its item when that is a short scalar (pipeline/labels.py)
    assert texts["shots"] == "=== [0 a] ===\nshot a\n=== [1 b] ===\nshot b\n"


def test_step_selection_and_errors(project: Project) -> None:
    path = make(project)
    assert list(render_pipeline(path, steps=["ask"]).texts()) == ["ask"]
    with pytest.raises(UsageError, match="unknown step 'nope'"):
        render_pipeline(path, steps=["nope"])
    with pytest.raises(UsageError, match="unknown fixture 'smal'"):
        render_pipeline(path, fixture="smal")


def test_an_unknown_fixture_param_is_located(project: Project) -> None:
    path = make(project, PIPELINE + "  typo:\n    params: {titel: x}\n")
    with pytest.raises(InvalidPipeline) as ei:
        render_pipeline(path, fixture="typo")
    assert ei.value.where is not None and ei.value.where.line == PIPELINE.count("\n") + 2
    assert "did you mean 'title'" in str(ei.value)


def test_a_failing_upstream_step_names_itself(project: Project) -> None:
    path = make(
        project,
        """\
        runner: 1
        name: broken
        steps:
          fail:
            uses: shell
            with: {run: "exit 3"}
          prompt:
            uses: template
            with: {text: "{{ x }}", vars: {x: "${{ steps.fail.output.stdout }}"}}
        """,
    )
    with pytest.raises(RenderError) as ei:
        render_pipeline(path)
    assert ei.value.step == "fail" and ei.value.exit_code == 1


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["RUNNER_STATE"] = str(root / "env-state")  # render must not use it either
    return subprocess.run(
        [sys.executable, "-m", "runner", "render", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_renders_are_byte_identical_across_processes_and_state_dirs(project: Project) -> None:
    make(project)
    one = _cli(project.root, "pipeline.yaml", "--fixture", "small", "--json", "--state", "s1")
    two = _cli(project.root, "pipeline.yaml", "--fixture", "small", "--json", "--state", "s2")
    assert one.returncode == 0, one.stderr
    assert one.stdout == two.stdout
    assert (project.root / "s1").is_dir() and (project.root / "s2").is_dir()
    # A reused state directory renders the same again (in this process).
    three = render_pipeline(
        project.root / "pipeline.yaml", fixture="small", state_dir=project.root / "s1"
    )
    assert [r.to_json() for r in three.renders] == json.loads(one.stdout)["renders"]
    assert not (project.root / ".runner").exists()
    assert not (project.root / "env-state").exists()


def test_render_json_shape(project: Project) -> None:
    make(project)
    res = project.cli(
        "render",
        "pipeline.yaml",
        "--fixture",
        "small",
        "--step",
        "prompt",
        "--step",
        "ask",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    doc = res.json
    assert doc["pipeline"] == "demo" and doc["fixture"] == "small" and doc["exit_code"] == 0
    assert [r["step"] for r in doc["renders"]] == ["prompt", "ask"]
    for r in doc["renders"]:
        assert set(r) >= {"step", "text", "sha256"}
        assert len(r["sha256"]) == 64
    assert not (project.root / ".runner").exists()


def test_render_text_output_and_exit_codes(project: Project) -> None:
    make(project)
    res = project.cli("render", "pipeline.yaml", "-p", "title=yo")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("=== draft (llm) ===\n--- user ---\nWrite a tagline for yo\n")
    assert "\n=== prompt (template) ===\nTitle: yo\n" in res.stdout
    assert "=== ask (llm) ===\n--- system ---\n" in res.stdout
    bad = project.cli("render", "pipeline.yaml", "--step", "nope", "--json")
    assert bad.exit_code == 2 and json.loads(bad.stdout)["exit_code"] == 2
    project.write("broken.yaml", "runner: 1\nname: x\nsteps:\n  a: {uses: nope}\n")
    invalid = project.cli("render", "broken.yaml")
    assert invalid.exit_code == 2
    assert "broken.yaml:4:" in invalid.stderr and "unknown step type 'nope'" in invalid.stderr


def test_a_project_fake_script_answers_upstream_llm_steps(project: Project) -> None:
    # The project's runner.toml scripts the fake provider; the render's upstream llm call uses
    # it even though the step names a paid provider.
    project.write(
        "runner.toml",
        """\
        [providers.fake]
        script = [{match = "tagline", reply = "Small is beautiful"}]
        """,
    )
    path = make(
        project,
        """\
        runner: 1
        name: scripted
        steps:
          draft:
            uses: llm
            with: {provider: openai, prompt: "Write a tagline"}
            check: ["${{ steps.draft.output.text | length > 0 }}"]
          prompt:
            uses: template
            with: {text: "Tagline: {{ t }}", vars: {t: "${{ steps.draft.output.text }}"}}
        """,
    )
    assert render_pipeline(path).texts()["prompt"] == "Tagline: Small is beautiful"


def test_a_fixture_can_limit_the_rendered_steps(project: Project) -> None:
    path = make(project, PIPELINE + "  only:\n    steps: [prompt]\n  wrong:\n    steps: [nope]\n")
    assert list(render_pipeline(path, fixture="only").texts()) == ["prompt"]
    with pytest.raises(InvalidPipeline) as ei:
        render_pipeline(path, fixture="wrong")
    assert "unknown step 'nope'" in str(ei.value)
    assert ei.value.where is not None and ei.value.where.line == PIPELINE.count("\n") + 4


def test_a_check_that_runs_a_command_runs_in_the_scratch_copy(project: Project) -> None:
    path = make(
        project,
        """\
        runner: 1
        name: exec-check
        steps:
          prompt:
            uses: template
            with: {text: "hi"}
            # a check that writes where it should not: the scratch copy, runner's own guarantee
            # where no sandbox confines it (an old kernel, macOS), keeps it out of the project
            sandbox: false
            check: [{exec: {run: "touch made-by-check"}}]
        """,
    )
    assert render_pipeline(path).texts() == {"prompt": "hi"}
    assert not (project.root / "made-by-check").exists()


def test_a_shell_step_asked_for_renders_the_script_it_runs_and_its_values(
    project: Project,
) -> None:
    """Values reach a command by environment (runner/expr/shellenv.py): the render shows the
    script as /bin/sh runs it, each variable's value beside it; the command does not run."""
    path = make(project)
    hostile = "it's $(touch PWNED)\n"
    text = render_pipeline(path, steps=["greet"], params={"title": hostile}).texts()["greet"]
    assert text == (
        "printf '%s' ''\"${RUNNER_VALUE_1}\"'' > out/greet.txt; cat out/greet.txt\n"
        "-- its environment holds --\n"
        f"RUNNER_VALUE_1={json.dumps(hostile)}\n"
    )
    assert not (project.root / "out" / "greet.txt").exists()
    assert not (project.root / "PWNED").exists()
    assert "greet" not in render_pipeline(path).texts()  # only when asked for
