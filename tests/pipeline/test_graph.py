"""`runner graph`: the DAG grouped by phase as text, Graphviz dot and Mermaid, and as JSON."""

from __future__ import annotations

import pytest

from tests.conftest import Project

PIPELINE = """\
runner: 1
name: graph-demo
phases: [prepare, render, unused]
steps:
  fetch:
    uses: shell
    phase: prepare
    with: {run: "echo hi > out/a.txt", outputs: [out/a.txt]}
  card:
    uses: hash
    phase: prepare
    with: {value: "${{ steps.fetch.output.stdout }}"}
  prompt:
    uses: template
    phase: render
    with: {text: "{{ c }}", vars: {c: "${{ steps.card.output.short }}"}}
  each:
    uses: hash
    phase: render
    for_each: "${{ [1, 2] }}"
    with: {value: "${{ item }}"}
    needs: [prompt]
  report:
    uses: shell
    with: {run: "true"}
    needs: [each, fetch]
"""

TEXT = """\
[prepare]
  fetch (shell)
  card (hash) <- fetch
[render]
  prompt (template) <- card
  each (hash) (for_each) <- prompt
[no phase]
  report (shell) <- each, fetch
"""

DOT = """\
digraph "graph-demo" {
  rankdir=LR;
  subgraph cluster_0 {
    label="prepare";
    s_fetch [label="fetch\\n(shell)"];
    s_card [label="card\\n(hash)"];
  }
  subgraph cluster_1 {
    label="render";
    s_prompt [label="prompt\\n(template)"];
    s_each [label="each\\n(hash)"];
  }
  subgraph cluster_2 {
    label="no phase";
    s_report [label="report\\n(shell)"];
  }
  s_fetch -> s_card;
  s_card -> s_prompt;
  s_prompt -> s_each;
  s_each -> s_report;
  s_fetch -> s_report;
}
"""

MERMAID = """\
flowchart LR
  subgraph p_s_prepare["prepare"]
    s_fetch["fetch (shell)"]
    s_card["card (hash)"]
  end
  subgraph p_s_render["render"]
    s_prompt["prompt (template)"]
    s_each["each (hash)"]
  end
  subgraph p_s_none["no phase"]
    s_report["report (shell)"]
  end
  s_fetch --> s_card
  s_card --> s_prompt
  s_prompt --> s_each
  s_each --> s_report
  s_fetch --> s_report
"""


@pytest.mark.parametrize(("fmt", "expected"), [("text", TEXT), ("dot", DOT), ("mermaid", MERMAID)])
def test_graph_formats(project: Project, fmt: str, expected: str) -> None:
    project.write("pipeline.yaml", PIPELINE)
    res = project.cli("graph", "pipeline.yaml", "--format", fmt)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == expected


def test_text_is_the_default(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    assert project.cli("graph", "pipeline.yaml").stdout == TEXT


def test_graph_json(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    res = project.cli("graph", "pipeline.yaml", "--format", "mermaid", "--json")
    assert res.exit_code == 0
    assert res.json == {
        "pipeline": "graph-demo",
        "format": "mermaid",
        "text": MERMAID,
        "nodes": ["fetch", "card", "prompt", "each", "report"],
        "edges": [
            ["fetch", "card"],
            ["fetch", "report"],
            ["card", "prompt"],
            ["prompt", "each"],
            ["each", "report"],
        ],
        "run": None,  # nothing ran yet: no worker to name (tests/engine/test_executor_where.py)
        "workers": {},
        "exit_code": 0,
    }


def test_graph_does_not_touch_state(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    project.cli("graph", "pipeline.yaml", "--format", "dot")
    assert not (project.root / ".runner").exists()


def test_graph_of_an_invalid_pipeline_is_a_usage_error(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE.replace("needs: [prompt]", "needs: [report]"))
    res = project.cli("graph", "pipeline.yaml", "--json")
    assert res.exit_code == 2
    assert res.json["exit_code"] == 2
    assert "dependency cycle: " in res.json["error"]["message"]


def test_unknown_format_is_refused(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    res = project.cli("graph", "pipeline.yaml", "--format", "svg")
    assert res.exit_code == 2 and "'svg' is not one of" in res.stderr


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_distinct_steps_get_distinct_node_ids(project: Project, fmt: str) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: ids
        steps:
          a-b: {uses: hash, with: {value: 1}}
          a_b: {uses: hash, with: {value: 2}, needs: [a-b]}
    """,
    )
    out = project.cli("graph", "pipeline.yaml", "--format", fmt).stdout
    edge = [ln.strip() for ln in out.splitlines() if "->" in ln]
    assert len(edge) == 1
    source, _arrow, target = edge[0].rstrip(";").split()
    assert source != target
