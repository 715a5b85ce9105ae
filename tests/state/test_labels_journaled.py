"""for_each labels are journaled with their run (issue 42; the ``labels`` table, migration 12):
`runs show` (text and --json) of an old run names its elements as the run did, though the
pipeline changed since or is gone; a no-op answered from the fingerprint journals them too; gc
deletes them with their run; a journal from before migration 12 still shows its runs."""

from __future__ import annotations

import sqlite3
import subprocess

from tests.conftest import Project, runner_bin
from tests.engine.test_fastpath import age_files

PEOPLE = """\
    runner: 1
    name: people
    params:
      people: {type: array, default: [{name: Ada, born: 1815}, {name: Alan, born: 1912}]}
    steps:
      greet:
        uses: template
        for_each: "${{ params.people }}"
        label: "${{ item.name }}"
        with: {text: "hello ${{ item.name }}"}
"""


def _labels(project: Project, run_id: str) -> list[tuple[int, str | None]]:
    doc = project.cli("runs", "show", run_id, "--json").json
    return [(e["element"], e["label"]) for e in doc["executions"] if e["step_id"] == "greet"]


def test_an_old_runs_elements_keep_their_names(project: Project) -> None:
    project.write("pipeline.yaml", PEOPLE)
    run_id = project.apply()["run"]["id"]
    assert _labels(project, run_id) == [(0, "Ada"), (1, "Alan")]
    # the pipeline names its elements otherwise now, then is gone: the run's names stay
    project.write("pipeline.yaml", PEOPLE.replace("item.name }}\"\n", "item.born }}\"\n", 1))
    later = project.apply()["run"]["id"]
    assert _labels(project, later) == [(0, "1815"), (1, "1912")]
    (project.root / "pipeline.yaml").unlink()
    assert _labels(project, run_id) == [(0, "Ada"), (1, "Alan")]
    text = project.cli("runs", "show", run_id).stdout
    assert "greet[0 Ada]" in text and "greet[1 Alan]" in text
    # gc takes them with their run
    gone = project.cli("gc", "--keep-last", "1", "--json")
    assert gone.exit_code == 0, gone.stderr
    db = sqlite3.connect(project.root / ".runner" / "journal.db")
    try:
        kept = {r[0] for r in db.execute("SELECT DISTINCT run_id FROM labels")}
    finally:
        db.close()
    assert kept == {later}


def test_a_no_op_from_the_fingerprint_journals_them(project: Project) -> None:
    project.write("pipeline.yaml", PEOPLE)
    for _ in range(2):  # the second apply records the fingerprint of aged files
        assert project.apply()["_exit"] == 0
        age_files(project.root)
    quick = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json"],
        cwd=project.root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert quick.returncode == 0, quick.stderr
    assert "nothing changed" in project.cli("apply", "pipeline.yaml").stdout
    latest = project.cli("runs", "show", "latest", "--json").json["run"]["id"]
    assert _labels(project, latest) == [(0, "Ada"), (1, "Alan")]


def test_a_journal_from_before_labels_were_kept_still_shows(project: Project) -> None:
    project.write("pipeline.yaml", PEOPLE)
    run_id = project.apply()["run"]["id"]
    db = sqlite3.connect(project.root / ".runner" / "journal.db", isolation_level=None)
    try:  # as a journal of migration 11 was: no labels table (nor migration 13's column)
        db.execute("DROP TABLE labels")
        db.execute("DROP INDEX idx_runs_pipeline_item_created_at")
        db.execute("ALTER TABLE runs DROP COLUMN repeats")
        db.execute("PRAGMA user_version=11")
    finally:
        db.close()
    shown = project.cli("runs", "show", run_id, "--json")
    assert shown.exit_code == 0, shown.stderr
    assert _labels(project, run_id) == [(0, None), (1, None)]  # migrated: nothing journaled
    assert _labels(project, project.apply()["run"]["id"]) == [(0, "Ada"), (1, "Alan")]
