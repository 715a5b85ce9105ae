"""A run is named by its id, by `latest` (the newest run) or by a unique prefix of its id, in every
command that takes one; a prefix several runs begin with is an error that lists them."""

from __future__ import annotations

import pytest

from tests.conftest import Project

GATED = """\
runner: 1
name: gated
steps:
  draft:
    uses: shell
    with: {run: "echo draft"}
  review:
    uses: human_gate
    with:
      summary: "Publish this draft?"
      show: {draft: "${{ steps.draft.output.stdout }}"}
  publish:
    uses: shell
    needs: [review]
    with: {run: "echo published"}
"""


@pytest.fixture
def two_runs(project: Project) -> tuple[Project, str, str]:
    """Two runs waiting at their gate: the older (item a) and the newest (item b)."""
    project.write("runner.toml", "")
    project.write("pipeline.yaml", GATED)
    older = project.cli("apply", "pipeline.yaml", "--item", "a", "--json", "-q").json["run"]["id"]
    newest = project.cli("apply", "pipeline.yaml", "--item", "b", "--json", "-q").json["run"]["id"]
    return project, older, newest


def _unique_prefix(run_id: str, other: str) -> str:
    n = next(i for i in range(len(run_id)) if run_id[: i + 1] != other[: i + 1]) + 1
    return run_id[:n]


def test_latest_and_a_unique_prefix_name_a_run_in_every_command(
    two_runs: tuple[Project, str, str],
) -> None:
    proj, older, newest = two_runs
    shown = proj.cli("runs", "show", "latest", "--json")
    assert shown.exit_code == 0 and shown.json["run"]["id"] == newest
    prefix = _unique_prefix(older, newest)
    assert proj.cli("runs", "show", prefix, "--json").json["run"]["id"] == older
    events = proj.cli("runs", "events", "latest")
    assert events.exit_code == 0 and f'"run_id": "{newest}"' in events.stdout
    decided = proj.cli("decide", prefix, "review", "approve", "--json")
    assert decided.exit_code == 0, decided.stderr
    decisions = proj.cli("runs", "decisions", prefix, "--json").json
    assert [d["decision"] for d in decisions["decisions"]] == ["approve"]
    cancelled = proj.cli("runs", "cancel", "latest", "--json")
    assert cancelled.exit_code == 0, cancelled.stderr
    assert proj.cli("runs", "show", newest, "--json").json["run"]["status"] == "cancelled"


def test_an_ambiguous_prefix_lists_the_runs_it_begins(two_runs: tuple[Project, str, str]) -> None:
    proj, older, newest = two_runs
    common = older[: len(_unique_prefix(older, newest)) - 1]
    res = proj.cli("runs", "show", common)
    assert res.exit_code == 2
    assert f"run '{common}' is ambiguous: it begins 2 runs: " in res.stderr
    # newest first, each with its pipeline and status
    assert f"{newest} (gated, awaiting_human), {older} (gated, awaiting_human)" in res.stderr
    assert "give more of the id (or 'latest' for the newest run)" in res.stderr
    doc = proj.cli("decide", common, "review", "approve", "--json").json
    assert doc["exit_code"] == 2 and "ambiguous" in doc["error"]["message"]


def test_a_prefix_is_text_not_a_pattern(two_runs: tuple[Project, str, str]) -> None:
    proj, _older, _newest = two_runs
    for pattern in ("%", "_", "2026%"):
        res = proj.cli("runs", "show", pattern)
        assert res.exit_code == 3 and f"unknown run '{pattern}'" in res.stderr


def test_latest_with_no_run_yet_says_so(project: Project) -> None:
    from runner.engine.run.apply import State

    project.write("runner.toml", "")
    State.open(project.root / ".runner").close()  # a journal, no run in it
    res = project.cli("runs", "show", "latest")
    assert res.exit_code == 3
    assert "no run yet: 'latest' names none" in res.stderr
