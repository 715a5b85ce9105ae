"""A step that sets none of the optional keys is built from the dataclass defaults (a shortcut
of the compiler's): they must be exactly what each key's absence gives on the full path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from runner.pipeline.compiler import compile_pipeline

PIPELINE = """\
runner: 1
name: defaults
steps:
  plain:
    uses: shell
    with: {run: "echo hi"}
  described:
    uses: shell
    with: {run: "echo hi"}
    description: ""
  spelled_out:
    uses: shell
    with: {run: "echo hi"}
    description: ""
    retries: 0
    cache: true
    on_partial: wait
    on_edit: restore
    on_skipped: skip
    needs_complete: false
    repeat_safe: true
"""


def test_a_plain_step_equals_one_that_spells_out_every_default(tmp_path: Path) -> None:
    file = tmp_path / "pipeline.yaml"
    file.write_text(PIPELINE, encoding="utf-8")
    plan = compile_pipeline(file)

    def fields(sid: str) -> dict[str, object]:
        got = dataclasses.asdict(plan.steps[sid]) | {"type": plan.steps[sid].type}
        return {k: v for k, v in got.items() if k not in ("id", "where")}

    assert fields("plain") == fields("described") == fields("spelled_out")
