"""Every step type documents its output (`runner steps NAME`), and what the steps really return
in real applies (the shipped pipelines and a generated one) is what the documentation names."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from runner.pipeline.compiler import compile_pipeline
from runner.steps.registry import default_registry
from tests.conftest import Project
from tests.engine.test_plan import SHIPPED, converge, shipped  # noqa: F401  (the fixture)

GENERATED = """\
runner: 1
name: kinds
steps:
  one: {uses: read, with: {path: in/a.json, as: json}}
  many: {uses: read, with: {path: "in/*.txt"}}
  h: {uses: hash, with: {value: "${{ steps.one.output.data }}"}}
  t: {uses: template, with: {text: "{{ x }}", vars: {x: "${{ steps.h.output.short }}"}}}
  sh:
    uses: shell
    with:
      run: "cat in/b.txt > out/b.txt"
      inputs: [in/b.txt]
      outputs: [out/b.txt]
"""


def outputs_by_type(root: Path, pipelines: list[Path]) -> dict[str, list[Any]]:
    """Each step type -> the outputs its completed executions recorded in the journal."""
    uses = {}
    for file in pipelines:
        plan = compile_pipeline(file)
        uses.update({(plan.name, sid): step.uses for sid, step in plan.steps.items()})
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute(
            "SELECT pipeline, step_id, output FROM executions WHERE status IN ('completed', 'partial') "
            "AND output IS NOT NULL"
        ).fetchall()
    finally:
        db.close()
    found: dict[str, list[Any]] = {}
    for pipeline, step_id, output in rows:
        found.setdefault(uses[(pipeline, step_id)], []).append(json.loads(output))
    return found


def assert_documented(found: dict[str, list[Any]]) -> None:
    registry = default_registry()
    for name, outputs in found.items():
        documented = set(registry.get(name).output_doc)  # type: ignore[union-attr]
        for output in outputs:
            assert isinstance(output, dict), (name, output)
            assert set(output) <= documented, (name, set(output) - documented)


def test_every_step_type_documents_its_output(project: Project) -> None:
    registry = default_registry()
    for name in registry.names():
        doc = registry.get(name).output_doc  # type: ignore[union-attr]
        assert doc and all(isinstance(v, str) and v for v in doc.values()), name
        shown = project.cli("steps", name)
        assert shown.exit_code == 0
        assert "arguments (with:)" in shown.stdout and "output (steps.ID.output.FIELD" in shown.stdout
        for field_name in doc:
            assert f"  {field_name}  " in shown.stdout, (name, field_name)
        listed = project.cli("steps", name, "--json")
        assert listed.json["steps"][0]["output"] == doc


def test_generated_pipeline_outputs_are_the_documented_ones(project: Project) -> None:
    project.write("pipeline.yaml", GENERATED)
    project.write("in/a.json", '{"k": [1, 2]}')
    project.write("in/b.txt", "bee\n")
    project.write("in/c.txt", "sea\n")
    (project.root / "out").mkdir()
    assert project.apply()["_exit"] == 0
    found = outputs_by_type(project.root, [project.root / "pipeline.yaml"])
    assert set(found) == {"read", "hash", "template", "shell"}
    assert_documented(found)
    reads = {tuple(sorted(o)) for o in found["read"]}
    assert reads == {("data", "path", "paths"), ("files", "paths")}


def test_shipped_pipeline_outputs_are_the_documented_ones(shipped: Project) -> None:  # noqa: F811
    for pipeline in SHIPPED:
        converge(shipped, pipeline)
    files = [shipped.root / "pipelines" / f"{p}.yaml" for p in SHIPPED]
    found = outputs_by_type(shipped.root, files)
    assert {"llm", "image", "finalize", "card", "verify_card", "ingest"} <= set(found), set(found)
    assert_documented(found)
