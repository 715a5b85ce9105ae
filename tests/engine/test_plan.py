"""`runner plan` / `apply --dry-run` / `explain`: exact, and they write nothing."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Project

SHIPPED = ("thumbnail", "scene-detail", "report", "classify-ingest")


@pytest.fixture
def shipped(project: Project) -> Project:
    for folder in ("pipelines", "prompts", "examples", "cards"):
        if (REPO / folder).is_dir():
            shutil.copytree(
                REPO / folder,
                project.root / folder,
                ignore=shutil.ignore_patterns(".runner", "out"),
            )
    shutil.copy(REPO / "runner.toml", project.root / "runner.toml")
    return project


def converge(project: Project, pipeline: str) -> None:
    """Apply a shipped pipeline to completion (approving its review gate if it has one)."""
    doc = project.apply(file=f"pipelines/{pipeline}.yaml")
    if doc["_exit"] == 7:
        decided = project.cli("decide", doc["run"]["id"], "review", "approve")
        assert decided.exit_code == 0, decided.stderr
        doc = project.apply(file=f"pipelines/{pipeline}.yaml")
    assert doc["_exit"] == 0, doc


def plan(project: Project, file: str, *args: str) -> tuple[int, dict[str, Any]]:
    res = project.cli("plan", file, "--json", *args)
    assert res.stdout, res.stderr
    return res.exit_code, res.json


def footprint(root: Path) -> dict[str, Any]:
    """Every file of the project with its size and mtime, and the journal's row counts."""
    files = {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }
    counts = {}
    db = root / ".runner/journal.db"
    if db.exists():
        conn = sqlite3.connect(db)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        conn.close()
    return {"files": files, "rows": counts}


def element_runs(root: Path, run_id: str) -> set[tuple[str, int]]:
    """(step, element) pairs that really executed in a run."""
    conn = sqlite3.connect(root / ".runner/journal.db")
    rows = conn.execute(
        "SELECT step_id, element FROM executions WHERE run_id=? AND status NOT IN ('cached')",
        (run_id,),
    ).fetchall()
    conn.close()
    return {(s, e) for s, e in rows}


def planned_runs(doc: dict[str, Any]) -> set[tuple[str, int]]:
    out = set()
    for s in doc["steps"]:
        for e in s.get("elements") or [{"index": -1, "action": s["action"]}]:
            if e["action"] != "cached":
                out.add((s["id"], e["index"]))
    return out


@pytest.mark.parametrize("pipeline", SHIPPED)
def test_plan_after_a_full_apply_says_nothing_would_run(shipped: Project, pipeline: str) -> None:
    converge(shipped, pipeline)
    before = footprint(shipped.root)
    code, doc = plan(shipped, f"pipelines/{pipeline}.yaml", "--detailed-exitcode")
    assert code == 0 and doc["exit_code"] == 0
    assert doc["would_change"] is False
    assert {s["action"] for s in doc["steps"]} == {"cached"}, doc["steps"]
    explained = shipped.cli("explain", f"pipelines/{pipeline}.yaml")
    assert explained.exit_code == 0
    lines = explained.stdout.splitlines()
    assert lines and all(line.startswith("cached") for line in lines), explained.stdout
    assert footprint(shipped.root) == before


@pytest.mark.parametrize("pipeline", SHIPPED)
def test_plan_on_a_fresh_project_writes_nothing(shipped: Project, pipeline: str) -> None:
    before = footprint(shipped.root)
    code, doc = plan(shipped, f"pipelines/{pipeline}.yaml", "--detailed-exitcode")
    assert code == 10 and doc["would_change"] is True
    assert not (shipped.root / ".runner").exists()
    dry = shipped.cli("apply", f"pipelines/{pipeline}.yaml", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert dry.json["steps"] == doc["steps"]
    assert "FAILED" not in dry.stdout + dry.stderr
    assert footprint(shipped.root) == before


def test_dry_run_of_the_thumbnail_pipeline_names_its_calls(shipped: Project) -> None:
    res = shipped.cli("apply", "pipelines/thumbnail.yaml", "--dry-run")
    assert res.exit_code == 0, res.stderr
    assert "run      prompt: never ran" in res.stdout
    # the prompt is computed (a template), so the image step's key is known: it would run
    assert "run      generate: never ran" in res.stdout
    assert "unknown  final: depends on 'generate', which would run first" in res.stdout
    assert "calls: 4 image to fake" in res.stdout
    assert not (shipped.root / ".runner").exists()


def test_edit_of_one_element_names_exactly_that_element(shipped: Project) -> None:
    converge(shipped, "scene-detail")
    scenes = shipped.root / "examples/scene-detail/scenes.yaml"
    text = scenes.read_text(encoding="utf-8")
    assert text.count("lens_hint: 35mm") >= 1
    scenes.write_text(text.replace("lens_hint: 35mm", "lens_hint: 50mm", 1), encoding="utf-8")
    before = footprint(shipped.root)
    _code, doc = plan(shipped, "pipelines/scene-detail.yaml")
    assert footprint(shipped.root) == before
    predicted = planned_runs(doc)
    assert ("scenes", -1) in predicted and ("system", -1) not in predicted
    per_step = {s for s, _e in predicted}
    assert per_step == {"scenes", "card", "user", "detail", "verify"}
    assert {e for s, e in predicted if s == "card"} == {e for s, e in predicted if s == "detail"}
    assert len({e for s, e in predicted if s == "card"}) < 6  # not every element
    # what the apply then really runs is exactly what the plan named
    doc = shipped.apply(file="pipelines/scene-detail.yaml")
    assert element_runs(shipped.root, doc["run"]["id"]) == predicted


FOR_EACH = """\
runner: 1
name: fan
params:
  names: {type: array, default: [a, b, c, d]}
steps:
  copy:
    uses: shell
    for_each: "${{ params.names }}"
    with:
      run: "mkdir -p out && cp in/${{ item }}.txt out/${{ item }}.txt"
      inputs: ["in/${{ item }}.txt"]
      outputs: ["out/${{ item }}.txt"]
  shout:
    uses: shell
    for_each: "${{ params.names }}"
    with:
      run: "tr a-z A-Z < out/${{ item }}.txt > out/${{ item }}.up"
      inputs: ["out/${{ item }}.txt"]
      outputs: ["out/${{ item }}.up"]
    needs: [copy]
  count:
    uses: template
    with:
      text: "{{ n }} files"
      vars: {n: "${{ steps.shout.output | length }}"}
  listing:
    uses: template
    with:
      text: "{{ outs }}"
      vars: {outs: "${{ steps.shout.output }}"}
"""


def test_generated_fan_plan_names_the_edited_element_and_downstream(project: Project) -> None:
    project.write("pipeline.yaml", FOR_EACH)
    for n in "abcd":
        project.write(f"in/{n}.txt", f"{n}\n")
    assert project.apply()["_exit"] == 0
    project.write("in/c.txt", "changed\n")
    _code, doc = plan(project, "pipeline.yaml")
    steps = {s["id"]: s for s in doc["steps"]}
    copy_c = steps["copy"]["elements"][2]
    assert copy_c["action"] == "run"
    assert copy_c["reasons"][0].startswith("input in/c.txt changed (")
    assert [e["action"] for e in steps["shout"]["elements"]] == [
        "cached",
        "cached",
        "unknown",
        "cached",
    ]
    assert "'copy'" in steps["shout"]["elements"][2]["reasons"][0]
    # the count reads only the list's length, known before shout runs; the listing reads it all
    assert steps["count"]["action"] == "cached"
    assert steps["listing"]["action"] == "unknown"
    assert planned_runs(doc) == {("copy", 2), ("shout", 2), ("listing", -1)}
    applied = project.apply()
    assert element_runs(project.root, applied["run"]["id"]) == planned_runs(doc)


def test_reasons_forced_and_cache_off(project: Project) -> None:
    project.write("pipeline.yaml", FOR_EACH.replace("  count:\n", "  count:\n    cache: false\n"))
    for n in "abcd":
        project.write(f"in/{n}.txt", f"{n}\n")
    project.apply()
    _code, doc = plan(project, "pipeline.yaml", "--force", "shout")
    steps = {s["id"]: s for s in doc["steps"]}
    assert steps["copy"]["action"] == "cached"
    assert {tuple(e["reasons"]) for e in steps["shout"]["elements"]} == {("forced (--force)",)}
    assert steps["count"]["action"] in ("run", "unknown")
    _code, plain = plan(project, "pipeline.yaml")
    assert {s["id"]: s["reasons"] for s in plain["steps"]}["count"] == [
        "cache is off (cache: false)"
    ]


def test_explain_lists_every_element_it_would_run(project: Project) -> None:
    names = [f"n{i}" for i in range(12)]
    project.write("pipeline.yaml", FOR_EACH.replace("[a, b, c, d]", "[" + ", ".join(names) + "]"))
    for n in names:
        project.write(f"in/{n}.txt", f"{n}\n")
    out = project.cli("explain", "pipeline.yaml").stdout
    assert all(f"[{i} n{i}] run: never ran" in out for i in range(12))  # index and label
    assert "jinja" not in out.lower() and "has no attribute" not in out


PRICED = """\
[general]
default_provider = "fake"

[prices]
currency = "USD"

[prices.fake]
image = 0.04
image_by_size = {"1536x1024" = 0.06}
"""


def test_cost_estimate_and_budgets_refuse_before_any_call(shipped: Project) -> None:
    (shipped.root / "runner.toml").write_text(PRICED, encoding="utf-8")
    _code, doc = plan(shipped, "pipelines/thumbnail.yaml")
    (line,) = doc["cost"]["calls"]
    assert line == {
        "provider": "fake",
        "model": line["model"],
        "kind": "image",
        "calls": 4,
        "cost": 0.24,
        "exact": True,
        "free": False,  # priced in runner.toml, so not the fake's default of free
    }
    assert doc["cost"]["total"] == pytest.approx(0.24) and doc["budget"] is None
    code, over = plan(shipped, "pipelines/thumbnail.yaml", "--max-cost", "0.1")
    assert code == 9 and over["budget"] == {"limit": 0.1, "source": "--max-cost", "over": True}
    refused = shipped.cli("apply", "pipelines/thumbnail.yaml", "--max-cost", "0.1")
    assert refused.exit_code == 9 and "exceeds the budget 0.1" in refused.stderr
    assert not (shipped.root / ".runner/journal.db").exists()
    (shipped.root / "runner.toml").write_text(PRICED + "\n[budget]\nmax_cost = 0.2\n")
    refused = shipped.cli("apply", "pipelines/thumbnail.yaml")
    assert refused.exit_code == 9 and "runner.toml [budget] max_cost" in refused.stderr
    # the lowest budget applies: 3 images x 0.06 = 0.18, within 0.2 and 1
    ok = shipped.cli("apply", "pipelines/thumbnail.yaml", "--max-cost", "1", "-p", "n=3", "-q")
    assert ok.exit_code == 0, ok.stderr
    _code, after = plan(shipped, "pipelines/thumbnail.yaml", "-p", "n=3")
    assert after["cost"]["calls"] == [] and after["budget"]["over"] is False


def test_bad_price_table_names_the_file(shipped: Project) -> None:
    (shipped.root / "runner.toml").write_text('[prices.fake]\nimage = "cheap"\n')
    res = shipped.cli("plan", "pipelines/thumbnail.yaml")
    assert (
        res.exit_code == 2 and "runner.toml" in res.stderr and "[prices.fake] image" in res.stderr
    )


def test_plan_read_from_the_fingerprint_equals_the_planners(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While the fast path's fingerprint holds, plan answers from it without compiling; what it
    # says is exactly what the planner says, for steps with and without for_each.
    import runner.pipeline.compiler as compiler

    project.write("pipeline.yaml", FOR_EACH)
    for n in "abcd":
        project.write(f"in/{n}.txt", f"{n}\n")
    assert project.apply()["_exit"] == 0  # converged: the fingerprint is recorded
    path = project.root / "pipeline.yaml"
    path.write_text("# a comment changes no key\n" + path.read_text())
    before = footprint(project.root)
    compiles: list[Path] = []
    real = compiler.compile_pipeline

    def counted(file: Path, *args: Any, **kwargs: Any) -> Any:
        compiles.append(file)
        return real(file, *args, **kwargs)

    monkeypatch.setattr(compiler, "compile_pipeline", counted)
    code, from_fingerprint = plan(project, "pipeline.yaml", "--detailed-exitcode")
    assert code == 0 and compiles == []
    text = project.cli("plan", "pipeline.yaml")
    assert compiles == [] and "nothing would run" in text.stdout
    assert footprint(project.root) == before  # the new bytes are not even remembered
    shutil.rmtree(project.root / ".runner" / "converged")
    code, from_planner = plan(project, "pipeline.yaml", "--detailed-exitcode")
    assert code == 0 and len(compiles) == 1
    assert from_fingerprint == from_planner
    assert any("elements" in s for s in from_planner["steps"])


FAN = """\
runner: 1
name: fan
params:
  items: {type: array, default: [a, b]}
  suffix: {type: string, default: ""}
steps:
  make:
    uses: shell
    with:
      run: "mkdir -p out && echo made > out/made.txt"
      outputs: [out/made.txt]
  fan:
    uses: hash
    for_each: "${{ params.items }}"
    with: {value: "${{ item ~ params.suffix }}"}
"""


def _reasons(project: Project, *args: str) -> dict[Any, list[str]]:
    """step id (or (step, element index)) -> the reasons plan gives for what it would run."""
    _code, doc = plan(project, "pipeline.yaml", *args)
    out: dict[Any, list[str]] = {}
    for s in doc["steps"]:
        out[s["id"]] = s["reasons"]
        for e in s.get("elements") or []:
            out[(s["id"], e["index"])] = e["reasons"]
    return out


def test_an_inserted_element_is_a_new_element_and_the_shifted_ones_are_cached(
    project: Project,
) -> None:
    project.write("pipeline.yaml", FAN)
    project.apply()
    reasons = _reasons(project, "-p", "items=[z, a, b]")
    # was: "arguments changed (...); element changed (...)" against the old element 0, a
    assert reasons[("fan", 0)] == ["new element"]
    assert reasons[("fan", 1)] == reasons[("fan", 2)] == ["key matches a completed run"]
    # a moved element whose own arguments changed is compared with its own last execution
    moved = _reasons(project, "-p", "items=[b, a]", "-p", "suffix=x")
    assert [r.split(" (")[0] for r in moved[("fan", 0)]] == ["arguments changed"]
    assert [r.split(" (")[0] for r in moved[("fan", 1)]] == ["arguments changed"]


def test_results_a_gc_removed_are_said_so_not_never_ran(project: Project) -> None:
    project.write("pipeline.yaml", FAN)
    project.apply()
    assert project.cli("gc", "--keep-last", "0").exit_code == 0
    reasons = _reasons(project)
    gone = "its earlier results were removed by `runner gc` ("
    assert reasons["make"][0].startswith(gone), reasons["make"]
    # which values the gc took is not recorded: an element may be new, or one it removed
    assert reasons[("fan", 0)][0].startswith(f"new element, or {gone}")
    assert reasons[("fan", 1)][0].startswith(f"new element, or {gone}")
    explained = project.cli("explain", "pipeline.yaml").stdout
    assert "never ran" not in explained and "removed by `runner gc`" in explained
    # once it ran again after the gc, the reasons are the usual ones
    project.apply()
    assert _reasons(project, "-p", "items=[a, b, c]")[("fan", 2)] == ["new element"]
