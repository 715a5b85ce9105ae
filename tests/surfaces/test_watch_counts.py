"""A watch cycle counts a for_each's work by element: editing one element is "ran 1 element"
(in the words plan and apply count in: surfaces/counts.py)."""

from __future__ import annotations

from runner.engine.run.apply import apply_file
from runner.surfaces.watch import work_counts
from tests.conftest import Project

PIPELINE = """\
runner: 1
name: counts
params:
  names: {type: array, default: [ada, bob, cy]}
steps:
  hello:
    uses: template
    for_each: "${{ params.names }}"
    with: {text: "hello ${{ item }}"}
  done:
    uses: template
    with: {text: "all greeted"}
"""


def test_work_counts_by_element(project: Project) -> None:
    path = project.write("pipeline.yaml", PIPELINE)
    state = project.root / ".runner"
    first = apply_file(path, state_dir=state)
    assert work_counts(first) == "ran 1 step and 3 elements"
    again = apply_file(path, {"names": '["ada", "bob", "dee"]'}, state_dir=state)
    assert work_counts(again) == "ran 1 element, cached 1 step and 2 elements"
