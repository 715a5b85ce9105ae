"""Live: the shipped produce -> review -> commit pipeline (pipelines/classify-ingest.yaml) on
llama.cpp's real server: classify three documents, wait for a human, then ingest or not.

The model's weights are random, so the labels come from the grammar llama.cpp builds from the
step's schema (an enum of the allowed labels): what is checked is the path, not the model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..conftest import REPO
from .kit import Run, runner
from .servers import Server
from .test_llm_live import config

pytestmark = pytest.mark.live
LABELS = {"invoice", "letter", "report"}


def shipped(root: Path, url: str) -> None:
    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".runner", "out"))
    config(root, url, max_concurrency=4)


def classify(root: Path) -> Run:
    run = runner(root, "apply", "pipelines/classify-ingest.yaml", "--json", "--state", ".runner")
    assert run.code == 7, run.stderr  # waiting for a decision
    assert run.statuses()["classify"] == "ran"
    assert run.statuses()["ingest"] != "ran"
    return run


def collection(root: Path) -> Run:
    return runner(root, "collections", "show", "documents", "--state", ".runner", "--json")


def test_classify_wait_approve_ingest(tmp_path: Path, llama: Server) -> None:
    shipped(tmp_path, llama.url)
    waiting = classify(tmp_path)
    assert collection(tmp_path).code != 0  # nothing committed before the decision
    decided = runner(
        tmp_path, "decide", waiting.doc["run"]["id"], "review", "approve", "--state", ".runner",
        "--json",
    )
    assert decided.code == 0, decided.stderr
    docs = collection(tmp_path)
    assert docs.code == 0, docs.stderr
    assert docs.doc["count"] == 3
    assert {d["metadata"]["label"] for d in docs.doc["documents"]} <= LABELS
    again = runner(tmp_path, "apply", "pipelines/classify-ingest.yaml", "--json", "--state", ".runner")
    assert again.code == 0, again.stderr
    assert collection(tmp_path).doc["count"] == 3  # re-ingesting never duplicates


def test_a_reject_commits_nothing(tmp_path: Path, llama: Server) -> None:
    shipped(tmp_path, llama.url)
    waiting = classify(tmp_path)
    decided = runner(
        tmp_path, "decide", waiting.doc["run"]["id"], "review", "reject", "--comment", "no",
        "--state", ".runner", "--json",
    )
    assert decided.code == 8, decided.stderr  # rejected: never 0
    shown = collection(tmp_path)
    assert shown.code != 0 or shown.doc["count"] == 0, shown.stdout
