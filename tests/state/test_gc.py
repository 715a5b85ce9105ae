"""`runner gc`: old runs go, everything a kept run, decision or cache entry needs stays."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Project

PIPE = """\
    runner: 1
    name: g
    params:
      text: {type: string, default: one}
    item: "${{ params.text }}"
    steps:
      make:
        uses: shell
        with: {run: "mkdir -p out && echo ${{ params.text }} > out/f.txt", outputs: [out/f.txt]}
      gate: {uses: human_gate, needs: [make], with: {summary: "ok?"}}
"""


def _objects(root: Path) -> set[str]:
    base = root / ".runner/objects"
    return {
        p.parent.name + p.name for p in base.rglob("*") if p.is_file() and len(p.parent.name) == 2
    }


def _approve(project: Project, *params: str) -> str:
    doc = project.apply(*params)
    assert doc["_exit"] == 7, doc
    run_id: str = doc["run"]["id"]
    assert (
        project.cli(
            "decide", "--no-resume", run_id, "gate", "approve", "--state", ".runner"
        ).exit_code
        == 0
    )
    assert project.apply(*params)["_exit"] == 0
    return run_id


def test_gc_keeps_what_kept_runs_need(project: Project) -> None:
    project.write("pipeline.yaml", PIPE)
    first = _approve(project)
    # three more runs of the same item: converged (cached) runs, keys shared with the first
    later = [project.apply()["run"]["id"] for _ in range(3)]
    other = _approve(project, "-p", "text=two")  # another item, its own decision
    before = _objects(project.root)
    dry = project.cli("gc", "--keep-last", "1", "--dry-run", "--state", ".runner", "--json")
    assert dry.exit_code == 0 and set(dry.json["runs_deleted"]) == {first, *later[:2]}
    assert _objects(project.root) == before
    res = project.cli("gc", "--keep-last", "1", "--state", ".runner", "--json")
    assert res.exit_code == 0, res.stderr
    assert set(res.json["runs_deleted"]) == {first, *later[:2]}
    listed = {
        r["id"] for r in project.cli("runs", "list", "--state", ".runner", "--json").json["runs"]
    }
    assert listed == {later[2], other}
    for rid in listed:
        assert project.cli("runs", "show", rid, "--state", ".runner").exit_code == 0
    verify = project.cli("verify", "--state", ".runner", "--json")
    assert verify.json["ok"] is True, verify.json["problems"]
    # the first run's cache entry (and its decision artifact) still serve the kept run
    (project.root / "out/f.txt").unlink()
    again = project.apply()
    assert again["_exit"] == 0 and {s["status"] for s in again["steps"]} == {"cached"}
    assert (project.root / "out/f.txt").read_text() == "one\n"
    decisions = project.cli("runs", "decisions", other, "--state", ".runner", "--json").json
    assert decisions["decisions"][0]["decision"] == "approve"


def test_gc_deletes_unreferenced_objects_and_honours_age(project: Project) -> None:
    project.write("pipeline.yaml", PIPE)
    _approve(project)
    stray = project.root / ".runner/objects/ab" / ("c" * 62)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"nobody points at me")
    young = project.cli("gc", "--older-than", "30d", "--state", ".runner", "--json").json
    assert young["runs_deleted"] == [] and young["objects_deleted"] == 1
    assert not stray.exists()
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True
    bad = project.cli("gc", "--older-than", "soon", "--state", ".runner")
    assert bad.exit_code == 2


def test_gc_never_deletes_a_waiting_run(project: Project) -> None:
    project.write("pipeline.yaml", PIPE)
    waiting = project.apply()["run"]["id"]
    res = project.cli("gc", "--keep-last", "0", "--state", ".runner", "--json")
    assert res.json["runs_deleted"] == []
    assert (
        project.cli(
            "decide", "--no-resume", waiting, "gate", "approve", "--state", ".runner"
        ).exit_code
        == 0
    )
    assert project.apply()["_exit"] == 0
