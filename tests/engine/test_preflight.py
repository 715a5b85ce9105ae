"""Preflight: what can be checked from params alone fails before any step runs or anyone is asked."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.conftest import REPO, Project


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
    assert "providers installed: fake" in res.stderr


def _line_col(path: object, needle: str) -> str:
    """`LINE:COL` (1-based) of the first ``needle`` in the file."""
    for n, line in enumerate(str(path).splitlines(), 1):
        if needle in line:
            return f"{n}:{line.index(needle) + 1}"
    raise AssertionError(needle)


def test_unknown_provider_points_at_the_provider_value_with_the_nearest_name(
    shipped: Project,
) -> None:
    text = (shipped.root / "pipelines/report.yaml").read_text()
    at = _line_col(text, '"${{ params.provider or none }}"')
    res = _apply(shipped, "report", "provider=opena")
    assert res.exit_code == 2
    assert f"report.yaml:{at}: step 'draft': unknown provider 'opena'" in res.stderr
    assert "did you mean 'openai'?" in res.stderr
    # a name configured in runner.toml is a candidate too, and listed
    shipped.write("runner.toml", '[providers.farm]\ntype = "fake"\n')
    shipped.write(
        "ask.yaml",
        """\
        runner: 1
        name: ask
        steps:
          ask:
            uses: llm
            check: ["${{ output.text | length > 0 }}"]
            with: {prompt: hi, provider: frm}
        """,
    )
    res = shipped.cli("apply", "ask.yaml", "--state", ".runner")
    assert res.exit_code == 2
    at = _line_col((shipped.root / "ask.yaml").read_text(), "frm")
    assert f"ask.yaml:{at}: step 'ask': unknown provider 'frm'" in res.stderr
    assert "did you mean 'farm'? (configured in runner.toml: farm; installed: fake" in res.stderr
    # none named: the default from runner.toml is what is unknown, and said so
    shipped.write("runner.toml", '[general]\ndefault_provider = "fakee"\n')
    shipped.write(
        "ask.yaml", (shipped.root / "ask.yaml").read_text().replace(", provider: frm", "")
    )
    res = shipped.cli("apply", "ask.yaml", "--state", ".runner")
    assert "step 'ask': unknown provider 'fakee' (runner.toml's default_provider)" in res.stderr
    assert "did you mean 'fake'?" in res.stderr


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


def test_an_image_size_the_provider_refuses(shipped: Project) -> None:
    # the fake draws sides of 1..4096 pixels
    res = _apply(shipped, "thumbnail", "size=5000x720")
    assert res.exit_code == 2, res.stderr
    assert re.search(
        r"thumbnail\.yaml:\d+:\d+: step 'generate': provider 'fake' does not make 5000x720 "
        r"images: a side is outside 1\.\.4096",
        res.stderr,
    )
    assert "sizes it accepts: 1x1 to 4096x4096" in res.stderr
    _no_runs(shipped)
    bad = _apply(shipped, "thumbnail", "size=wide")
    assert bad.exit_code == 2 and "size must be 'WIDTHxHEIGHT'" in bad.stderr
    _no_runs(shipped)


def _sized(project: Project, size: str) -> None:
    project.write(
        "pipeline.yaml",
        f"""\
        runner: 1
        name: sized
        steps:
          picture:
            uses: image
            with: {{prompt: "a cat", provider: openai, size: "{size}"}}
        """,
    )


@pytest.mark.parametrize(
    ("model", "size", "accepted"),
    [
        ("gpt-image-1", "1280x720", "1024x1024, 1536x1024, 1024x1536"),
        ("gpt-image-1-mini", "1792x1024", "1024x1024, 1536x1024, 1024x1536"),
        ("dall-e-3", "1536x1024", "1024x1024, 1792x1024, 1024x1792"),
        ("dall-e-2", "1024x1792", "256x256, 512x512, 1024x1024"),
    ],
)
def test_openai_sizes_by_model(project: Project, model: str, size: str, accepted: str) -> None:
    project.write(
        "runner.toml",
        f"""\
        [providers.openai]
        image_model = "{model}"
        """,
    )
    _sized(project, size)
    env = {"OPENAI_API_KEY": "sk-test"}  # never sent: nothing runs
    res = project.cli("apply", "pipeline.yaml", "--state", ".runner", env=env)
    assert res.exit_code == 2, res.stderr
    assert f"provider 'openai' does not make {size} images: model {model}" in res.stderr
    assert f"sizes it accepts: {accepted}" in res.stderr
    _no_runs(project)
    ok = {"gpt-image-1": "1536x1024", "gpt-image-1-mini": "1024x1536"}.get(model, "1024x1024")
    assert ok in accepted
    _sized(project, ok)
    plan = project.cli("apply", "pipeline.yaml", "--state", ".runner", "--dry-run", env=env)
    assert plan.exit_code == 0, plan.stderr


def test_out_folder_is_checked_before_the_first_step(shipped: Project) -> None:
    (shipped.root / "taken.txt").write_text("a file\n", encoding="utf-8")
    args = ["apply", "pipelines/thumbnail.yaml", "--state", ".runner"]
    res = shipped.cli(*args, "--out", "taken.txt")
    assert res.exit_code == 2 and "'taken.txt' is a file" in res.stderr, res.stderr
    below = shipped.cli(*args, "--out", "taken.txt/finals")
    assert below.exit_code == 2 and "cannot be made: " in below.stderr
    assert "taken.txt is a file" in below.stderr
    _no_runs(shipped)
    report = shipped.cli("apply", "pipelines/report.yaml", "--state", ".runner", "--out", "x")
    assert report.exit_code == 2
    assert "pipeline report has no image step, so nothing would be copied" in report.stderr
    _no_runs(shipped)
    made = shipped.cli(*args, "--out", "exports/new/finals", "-p", "n=1")
    assert made.exit_code == 0, made.stderr
    assert [p.name for p in (shipped.root / "exports" / "new" / "finals").iterdir()]
