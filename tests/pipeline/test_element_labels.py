"""A for_each element is named by value (issue 42): its `label:`, else its item when that is a
short scalar, on the console, in plan, in render's snapshots (the page: test_web_page_ii)."""

from __future__ import annotations

from tests.conftest import Project

CITIES = """\
    runner: 1
    name: cities
    params:
      cities: {type: array, default: [Paris, Lagos, Lima]}
      people: {type: array, default: [{name: Ada}, {name: "x\\u001b[31mred"}]}
    steps:
      describe:
        uses: template
        for_each: "${{ params.cities }}"
        with: {text: "{{ c }} at dawn", vars: {c: "${{ item }}"}}
      greet:
        uses: template
        for_each: "${{ params.people }}"
        label: "${{ item.name }}"
        with: {text: "hello {{ n }}", vars: {n: "${{ item.name }}"}}
      plain:
        uses: template
        for_each: "${{ [[1, 2], {'a': 1}] }}"
        with: {text: "x"}
"""


def test_the_console_plan_and_render_name_elements(project: Project) -> None:
    project.write("pipeline.yaml", CITIES)
    planned = project.cli("plan", "pipeline.yaml")
    assert "[1 Lagos] run" in planned.stdout and "[0 Ada] run" in planned.stdout
    assert "[0] run" in planned.stdout  # a list or a mapping item keeps its index only
    applied = project.cli("apply", "pipeline.yaml")
    assert applied.exit_code == 0, applied.stderr
    out = applied.stdout + applied.stderr
    assert "describe[2 Lima]" in out and "greet[0 Ada]" in out and "plain[1]" in out
    assert "\x1b" not in out and "greet[1 x\\e[31mred]" in out  # a label is made inert
    rendered = project.cli("render", "pipeline.yaml", "--step", "describe")
    assert "=== [0 Paris] ===\nParis at dawn" in rendered.stdout
    doc = project.cli("plan", "pipeline.yaml", "-p", "cities=[Paris, Oslo]", "--json").json
    [describe] = [s for s in doc["steps"] if s["id"] == "describe"]
    assert [e.get("label") for e in describe["elements"]] == ["Paris", "Oslo"]


def test_a_label_needs_a_for_each(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: x
        steps:
          one:
            uses: template
            label: "${{ 'a' }}"
            with: {text: "x"}
        """,
    )
    res = project.cli("validate", "pipeline.yaml")
    assert res.exit_code != 0
    assert "pipeline.yaml:6:5" in res.stderr and "`label:` names the elements" in res.stderr
