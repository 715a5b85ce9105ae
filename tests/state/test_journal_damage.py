"""Issue 16 point 9: a damaged or lost journal gets a clear message and a way forward.

Every damage in tests/store_corpus/damaged_journals.yaml meets every command that reads the
journal: none prints a traceback; what cannot go on says so and names `runner verify --repair`;
a journal that is missing or empty beside the object store is not taken for a new project (that
would forget which calls were paid for); the repair gets the project applying again.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, Project
from tests.review.test_thumbnail import apply as thumb_apply
from tests.review.test_thumbnail import cli as thumb_cli

CORPUS = Path(__file__).parent.parent / "store_corpus" / "damaged_journals.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
SMALL = ("-p", "n=2")


def damage_journal(path: Path, case: dict[str, Any]) -> None:
    how = case["how"]
    if how == "truncate":
        size = path.stat().st_size // 2 if case["size"] == "half" else int(case["size"])
        os.truncate(path, size)
    elif how == "delete":
        path.unlink()
    elif how == "overwrite":
        with open(path, "r+b") as f:
            f.seek(case["offset"])
            f.write(bytes((i * 151 + 7) % 256 for i in range(case["length"])))
    else:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            if how == "drop":
                conn.execute(f"DROP TABLE {case['table']}")
            else:
                table, col = case["table"], case["column"]
                value = {
                    "json": "'{\"cut off'",
                    # bytes that are not UTF-8, stored as text (SQLite does not check)
                    "bytes": "CAST(X'7b2261223a22ff227d' AS TEXT)",
                    "deep": "'" + "[" * 100_000 + "]" * 100_000 + "'",
                    "nan": "'{\"a\": NaN}'",
                    "null": "NULL",
                    # a value that parses but is not what the column must hold (a digest)
                    "value": "'" + str(case.get("value", "")).replace("'", "''") + "'",
                }[how]
                conn.execute(
                    f"UPDATE {table} SET {col}={value} "
                    f"WHERE rowid=(SELECT min(rowid) FROM {table} WHERE {col} IS NOT NULL)"
                )
        finally:
            conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _no_traceback(res: Any) -> None:
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    assert "runner hit a bug" not in res.stderr, res.stderr


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The thumbnail project after one small apply, made once: each case damages a copy."""
    root = tmp_path_factory.mktemp("applied")
    (root / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    first = thumb_apply(Project(root), *SMALL)
    assert first["_exit"] == 0
    return root, first["run"]["id"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_damaged_journal_gets_a_message_and_a_way_forward(
    applied: tuple[Path, str], tmp_path: Path, case: dict[str, Any]
) -> None:
    pristine, run_id = applied
    thumbs = Project(tmp_path / "project")
    shutil.copytree(pristine, thumbs.root)  # the journal with its -wal, byte for byte
    journal = thumbs.root / ".runner" / "journal.db"
    damage_journal(journal, case)
    results = {
        "apply": thumbs.cli("apply", "pipelines/thumbnail.yaml", "-q", "--state", ".runner", *SMALL),
        "runs list": thumb_cli(thumbs, "runs", "list"),
        "runs show": thumb_cli(thumbs, "runs", "show", run_id),
        "verify": thumb_cli(thumbs, "verify"),
        "gc": thumb_cli(thumbs, "gc", "--keep-last", "5"),
        "export": thumb_cli(thumbs, "export", run_id, "--to", "out"),
    }
    for name, res in results.items():
        _no_traceback(res)
        if res.exit_code not in (0, 3):  # 3: the run was in what is lost
            assert "runner verify --repair" in res.stderr + res.stdout, (name, res.stderr)
    if case["how"] in ("truncate", "delete"):
        # not a new project: apply refuses instead of starting a journal with no paid calls
        assert results["apply"].exit_code == 1, results["apply"].stderr
        assert "not a new project" in results["apply"].stderr or "damaged" in results[
            "apply"
        ].stderr
    assert results["verify"].exit_code in (0, 1)
    if case.get("verify_finds"):  # not "ok" over a record no reader can use
        assert results["verify"].exit_code == 1, results["verify"].stdout
    if case.get("apply_runs"):  # a record that names no object is a miss, not a failure
        assert results["apply"].exit_code == 0, results["apply"].stderr
    repair = thumb_cli(thumbs, "verify", "--repair", "--yes", "--json")
    _no_traceback(repair)
    assert repair.exit_code == 0 and repair.json["ok"] is True, repair.stdout
    again = thumb_apply(thumbs, *SMALL)
    assert again["_exit"] == 0, again
    assert thumb_cli(thumbs, "verify", "--json").json["ok"] is True
