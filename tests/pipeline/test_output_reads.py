"""Outputs are typed: every `steps.X.output...` and check `output...` is checked against what
the step's type declares before anything runs, and what each type delivers is what it declares.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.errors import InvalidPipeline
from runner.pipeline.compiler import compile_pipeline
from runner.steps.outputshape import conforms
from runner.steps.registry import default_registry
from tests.conftest import REPO, Project


def _compile(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return compile_pipeline(path)


def _refused(tmp_path: Path, text: str) -> InvalidPipeline:
    with pytest.raises(InvalidPipeline) as info:
        _compile(tmp_path, text)
    return info.value


def test_a_check_reading_a_field_the_output_has_not_is_a_compile_error(tmp_path: Path) -> None:
    err = _refused(
        tmp_path,
        """\
        runner: 1
        name: typo
        steps:
          ask:
            uses: llm
            retries: 2
            with: {prompt: "Say hi."}
            check:
              - "${{ output.txt | length > 10 }}"
        """,
    )
    assert "output has no field 'txt'" in err.message
    assert err.hint == "did you mean 'text'?"
    assert err.where is not None and (err.where.line, err.where.column) == (9, 9)


def test_a_step_reading_another_steps_misspelt_field_is_a_compile_error(tmp_path: Path) -> None:
    err = _refused(
        tmp_path,
        """\
        runner: 1
        name: typo
        steps:
          poster:
            uses: image
            with: {prompt: "a poster", n: 2}
          show:
            uses: shell
            with:
              run: echo "$N"
              env:
                N: "${{ steps.poster.output.iteratons | length }}"
        """,
    )
    assert "steps.poster.output has no field 'iteratons'" in err.message
    assert err.hint == "did you mean 'iterations'?"
    assert err.step == "show"
    assert err.where is not None and err.where.line == 12


def test_fields_inside_lists_and_schemas_are_checked_and_mappings_are_not(tmp_path: Path) -> None:
    base = """\
        runner: 1
        name: deep
        steps:
          poster:
            uses: image
            with: {prompt: "a poster", n: 2}
          facts:
            uses: llm
            with:
              prompt: "Give a title as JSON."
              schema:
                type: object
                additionalProperties: false
                properties: {title: {type: string}}
            check: ["${{ output.json.title | length > 0 }}"]
          use:
            uses: shell
            with:
              run: echo "$V"
              env: {V: "${{ READ }}"}
        """
    err = _refused(tmp_path, base.replace("READ", "steps.poster.output.iterations[0].rwa"))
    assert "steps.poster.output.iterations[0] has no field 'rwa'" in err.message
    assert err.hint == "did you mean 'raw'?"
    err = _refused(tmp_path, base.replace("READ", "steps.facts.output.json.titel"))
    assert err.hint == "did you mean 'title'?"
    # Keys that are data (usage, metadata) and a scalar's own methods are not refused.
    for fine in (
        "steps.facts.output.usage.prompt_tokens",
        "steps.poster.output.iterations[0].metadata.anything",
        "steps.facts.output.text.upper()",
        "steps.poster.output.iterations | map(attribute='raw') | join(',')",
    ):
        _compile(tmp_path, base.replace("READ", fine))


def test_a_for_each_steps_output_is_a_list_of_its_elements_outputs(tmp_path: Path) -> None:
    err = _refused(
        tmp_path,
        """\
        runner: 1
        name: each
        steps:
          hashes:
            uses: hash
            for_each: [a, b]
            with: {value: "${{ item }}"}
            check: ["${{ output.short | length == 16 }}"]
          join:
            uses: shell
            with:
              run: echo "$S"
              env: {S: "${{ steps.hashes.output.short }}"}
        """,
    )
    assert "steps.hashes.output is a list, so it has no field 'short'" in err.message
    assert "runs for_each" in err.message
    assert "steps.hashes.output[0].short" in (err.hint or "")


def test_a_read_steps_output_follows_its_glob_or_path(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("a", encoding="utf-8")
    text = """\
        runner: 1
        name: reads
        steps:
          notes:
            uses: read
            with: {path: PATH}
          use:
            uses: shell
            with:
              run: echo "$V"
              env: {V: "${{ steps.notes.output.FIELD }}"}
        """
    err = _refused(tmp_path, text.replace("PATH", "notes/*.md").replace("FIELD", "text"))
    assert "steps.notes.output has no field 'text'" in err.message
    _compile(tmp_path, text.replace("PATH", "notes/*.md").replace("FIELD", "files[0].text"))
    _compile(tmp_path, text.replace("PATH", "notes/a.md").replace("FIELD", "text"))
    err = _refused(tmp_path, text.replace("PATH", "notes/a.md").replace("FIELD", "files"))
    assert "has no field 'files'" in err.message


@pytest.fixture
def shipped(project: Project) -> Project:
    for folder in ("pipelines", "prompts", "examples", "cards"):
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, project.root / folder, dirs_exist_ok=True)
    return project


def test_every_shipped_pipelines_outputs_are_what_their_types_declare(shipped: Project) -> None:
    """Declared = delivered: each output the shipped pipelines journal on `fake` conforms to
    its type's declared shape (a declaration that is wrong would refuse a correct pipeline,
    or let a typo through)."""
    registry = default_registry()
    applied = 0
    for pipeline in sorted((shipped.root / "pipelines").glob("*.yaml")):
        params = ["-p", "video_id=dQw4w9WgXcQ"] if pipeline.stem == "thumbnail" else []
        doc = shipped.apply("--state", ".runner", *params, file=f"pipelines/{pipeline.name}")
        assert doc["_exit"] in (0, 7), doc
        if doc["_exit"] == 7:  # a gate waits: approve it, so what follows it runs too
            run_id = doc["run"]["id"]
            res = shipped.cli("decide", run_id, "review", "approve", "--state", ".runner")
            assert res.exit_code == 0, res.stdout + res.stderr
        applied += 1
    with sqlite3.connect(shipped.root / ".runner" / "journal.db") as db:
        rows = db.execute(
            "SELECT e.step_id, e.output, r.pipeline FROM executions e JOIN runs r "
            "ON e.run_id = r.id WHERE e.status = 'completed' AND e.output IS NOT NULL"
        ).fetchall()
    assert applied >= 4 and len(rows) >= 10
    checked = set()
    for step_id, output, pipeline_name in rows:
        path = shipped.root / "pipelines" / f"{pipeline_name}.yaml"
        plan = compile_pipeline(path, {"video_id": "x"} if pipeline_name == "thumbnail" else {})
        step = plan.steps[step_id]
        raw = plan.doc.data["steps"][step_id].get("with") or {}
        shape = step.type.output_shape(raw)
        assert registry.get(step.uses) is step.type
        assert conforms(json.loads(output), shape) == [], (pipeline_name, step_id)
        checked.add(step.uses)
    assert {"llm", "image", "read", "shell", "template", "human_gate"} <= checked, checked


def test_a_non_string_env_value_becomes_text_by_the_one_documented_rule(project: Project) -> None:
    """A number, a boolean, null and a list from expressions reach a command's environment as
    they would inside a string: no internal TypeError."""
    project.write(
        "pipeline.yaml",
        textwrap.dedent(
            """\
            runner: 1
            name: envs
            params:
              n: {type: integer, default: 3}
            steps:
              count:
                uses: hash
                with: {value: [a, b]}
              show:
                uses: shell
                with:
                  run: 'printf "%s|%s|%s|%s|%s" "$N" "$B" "$Z" "$L" "$F" > out.txt'
                  env:
                    N: "${{ params.n }}"
                    B: "${{ params.n > 2 }}"
                    Z: "${{ none }}"
                    L: "${{ [1, 'two'] }}"
                    F: 2.5
                  outputs: [out.txt]
            """
        ),
    )
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    assert (project.root / "out.txt").read_text() == '3|true||[1, "two"]|2.5'


def _documented_pipelines() -> list[tuple[str, str]]:
    """Every whole pipeline (a ```yaml block that starts with `runner:`) in README and docs/."""
    import re

    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.S)):
            if block.startswith("runner:"):
                found.append((f"{page.relative_to(REPO)}#{i}", block))
    return found


@pytest.mark.parametrize(("where", "text"), _documented_pipelines(), ids=lambda v: str(v)[:40])
def test_every_documented_pipeline_passes_runner_check(
    shipped: Project, where: str, text: str
) -> None:
    """No false error: the typed-output and provider checks pass what the docs show."""
    shipped.write("pipelines/documented.yaml", text)
    res = shipped.cli("check", "pipelines/documented.yaml", "--strict")
    assert res.exit_code == 0, (where, res.stdout, res.stderr)
