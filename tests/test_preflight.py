"""Preflight: what can be checked from params alone fails before any step runs or anyone is asked."""

from __future__ import annotations

import re
import shutil

import pytest

from .conftest import REPO, Project


@pytest.fixture
def shipped(project: Project) -> Project:
    for folder in ("pipelines", "prompts", "examples", "cards", "schemas"):
        shutil.copytree(
            REPO / folder, project.root / folder, ignore=shutil.ignore_patterns(".runner", "out")
        )
    return project


def _apply(project: Project, pipeline: str, *params: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    args = [a for p in params for a in ("-p", p)]
    return project.cli("apply", f"pipelines/{pipeline}.yaml", "--state", ".runner", *args, env=env)


def _no_runs(project: Project) -> None:
    listed = project.cli("runs", "list", "--state", ".runner", "--json")
    assert listed.exit_code != 0 or listed.json["runs"] == []


def test_bad_collection_name_fails_before_classifying(shipped: Project) -> None:
    res = _apply(shipped, "classify-ingest", "collection=web-docs")
    assert res.exit_code == 2
    # file:line:column of the ingest step, its name, and the rule
    assert re.search(
        r"classify-ingest\.yaml:\d+:\d+: step 'ingest': invalid collection name", res.stderr
    )
    assert "Traceback" not in res.stderr
    _no_runs(shipped)  # nothing was classified, nobody was asked


def test_unknown_collection_that_may_not_be_created(shipped: Project) -> None:
    res = _apply(shipped, "classify-ingest", "collection=nowhere", "create=false")
    assert res.exit_code == 2 and "unknown collection 'nowhere'" in res.stderr
    _no_runs(shipped)


def test_missing_api_key_fails_at_once(shipped: Project) -> None:
    env = {"OPENAI_API_KEY": ""}
    res = _apply(shipped, "report", "provider=openai", env=env)
    assert res.exit_code == 2
    assert "step 'draft': provider 'openai' needs an API key in the environment variable" in (
        res.stderr
    )
    assert "OPENAI_API_KEY" in res.stderr and "-p provider=fake" in res.stderr
    _no_runs(shipped)


def test_unknown_provider_names_the_step(shipped: Project) -> None:
    res = _apply(shipped, "report", "provider=nope")
    assert res.exit_code == 2
    assert re.search(r"report\.yaml:\d+:\d+: step 'draft': unknown provider 'nope'", res.stderr)
    assert "installed providers: fake" in res.stderr


def test_an_llm_step_needs_a_text_provider(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: wrong-kind
        steps:
          ask:
            uses: llm
            with: {prompt: "a cat", provider: a1111}
            check: ["${{ output.text != '' }}"]
          gate:
            uses: human_gate
            needs: [ask]
            with: {summary: "ok?"}
        """,
    )
    res = project.cli("apply", "pipeline.yaml", "--state", ".runner")
    assert res.exit_code == 2 and "provider 'a1111' does not make text" in res.stderr


def test_missing_template_variable_fails_before_the_gate(project: Project) -> None:
    project.write("hello.j2", "Hello {{ name }} from {{ place }}\n")
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: tpl
        params:
          name: {type: string, default: Ada}
        steps:
          prompt:
            uses: template
            with: {template: hello.j2, vars: {name: "${{ params.name }}"}}
          gate:
            uses: human_gate
            with: {summary: "${{ steps.prompt.output.text }}"}
        """,
    )
    res = project.cli("apply", "pipeline.yaml", "--state", ".runner")
    assert res.exit_code == 2, res.stderr
    assert "step 'prompt'" in res.stderr and "place" in res.stderr
    _no_runs(project)


def test_an_output_path_that_is_a_folder(shipped: Project) -> None:
    (shipped.root / "out" / "taken").mkdir(parents=True)
    res = _apply(shipped, "report", "out=out/taken")
    assert res.exit_code == 2 and "output 'out/taken' is a folder" in res.stderr
    _no_runs(shipped)
    escape = _apply(shipped, "report", "out=../elsewhere.md")
    assert escape.exit_code == 2 and "escapes the pipeline root" in escape.stderr
    _no_runs(shipped)


def test_values_from_upstream_steps_are_left_to_the_run(shipped: Project) -> None:
    # the shipped pipelines pass: nothing only known at run time is guessed at
    for name in ("report", "classify-ingest", "thumbnail", "scene-detail"):
        res = _apply(shipped, name)
        assert res.exit_code in (0, 7), (name, res.stderr)
