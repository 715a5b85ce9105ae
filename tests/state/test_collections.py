"""Collections and the ingest step: stable ids, upsert, unknown names, collection_has, CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import NotFound, UsageError
from runner.state.collections import Collections, Document
from tests.conftest import Project

INGEST = """\
    runner: 1
    name: ing
    params:
      create: {type: boolean, default: true}
    steps:
      put:
        uses: ingest
        with:
          collection: notes
          create: "${{ params.create }}"
          metadata: {kind: note}
          documents:
            - {path: docs/a.txt, metadata: {lang: en}}
            - {path: docs/b.txt}
            - {id: inline-1, text: "an inline note about zebras"}
        check:
          - {collection_has: {collection: notes, ids: "${{ output.ids }}"}}
          - {collection_has: {collection: notes, where: {lang: en}, min_count: 1}}
"""


def _setup(project: Project) -> None:
    project.write("docs/a.txt", "apples and pears\n")
    project.write("docs/b.txt", "bananas\n")
    project.write("pipeline.yaml", INGEST)


def test_ingest_upserts_by_stable_id(project: Project) -> None:
    _setup(project)
    doc = project.apply()
    assert doc["_exit"] == 0, doc
    with Collections(project.root / ".runner") as cols:
        assert cols.count("notes") == 3
        assert cols.present("notes", ["docs/a.txt", "docs/b.txt", "inline-1"]) == {
            "docs/a.txt",
            "docs/b.txt",
            "inline-1",
        }
    # an unchanged re-ingest (forced past the cache) leaves every row alone
    again = project.apply("--force", "put")
    assert again["_exit"] == 0
    with Collections(project.root / ".runner") as cols:
        assert cols.count("notes") == 3
    # an edited source updates its row, still three rows
    project.write("docs/b.txt", "bananas and kiwis\n")
    edited = project.apply()
    assert edited["_exit"] == 0 and edited["steps"][0]["status"] == "ran"
    with Collections(project.root / ".runner") as cols:
        assert cols.count("notes") == 3
        [hit] = cols.search("notes", "kiwis")
        assert hit["id"] == "docs/b.txt" and hit["metadata"] == {"kind": "note"}


def test_upsert_reports_inserted_updated_unchanged(tmp_path: Path) -> None:
    with Collections(tmp_path) as cols:
        assert cols.create("c") is True and cols.create("c") is False
        first = cols.upsert("c", [Document("x", "one"), Document("y", "two")])
        assert first.to_json() == {"inserted": 2, "updated": 0, "unchanged": 0}
        second = cols.upsert("c", [Document("x", "one"), Document("y", "TWO")])
        assert second.to_json() == {"inserted": 0, "updated": 1, "unchanged": 1}
        assert cols.count("c") == 2
        assert [h["id"] for h in cols.search("c", "two")] == ["y"]
        assert cols.search("c", "one")[0]["id"] == "x"
        with pytest.raises(UsageError):
            cols.search("c", '"unbalanced', syntax=True)  # words never make a bad query
        with pytest.raises(NotFound):
            cols.upsert("missing", [Document("x", "one")])
        with pytest.raises(UsageError):
            cols.create("Bad Name")


def test_unknown_collection_is_an_error_without_create(project: Project) -> None:
    _setup(project)
    doc = project.apply("-p", "create=false")
    # known from the params alone: refused before anything runs (runner/engine/run/preflight.py)
    assert doc["_exit"] == 2 and doc["error"]["where"]
    assert "unknown collection 'notes'" in doc["error"]["message"]


def test_collection_has_fails_for_missing_documents(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: has
        steps:
          put:
            uses: ingest
            with: {collection: c1, create: true, documents: [{id: one, text: "x"}]}
            check:
              - {collection_has: {collection: c1, ids: [one, two]}}
    """,
    )
    doc = project.apply()
    assert doc["_exit"] == 5
    assert "1 document(s) missing from 'c1': two" in doc["steps"][0]["reason"]


def test_collections_cli(project: Project) -> None:
    _setup(project)
    assert project.apply()["_exit"] == 0
    listed = project.cli("collections", "list", "--json").json
    assert listed["collections"][0]["name"] == "notes" and listed["collections"][0]["count"] == 3
    shown = project.cli("collections", "show", "notes", "--json").json
    assert {d["id"] for d in shown["documents"]} == {"docs/a.txt", "docs/b.txt", "inline-1"}
    found = project.cli("collections", "search", "notes", "zebras", "--json").json
    assert [h["id"] for h in found["hits"]] == ["inline-1"]
    missing = project.cli("collections", "show", "nope")
    assert missing.exit_code == 3 and "unknown collection 'nope'" in missing.stderr
    text = project.cli("collections", "list")
    assert "notes" in text.stdout and text.exit_code == 0
