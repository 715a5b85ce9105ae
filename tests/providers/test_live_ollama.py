"""Live: the shipped classify-ingest pipeline against a real Ollama on 127.0.0.1:11434.

Skipped (cleanly, in about half a second) when nothing answers on that port or no model is
pulled. Set RUNNER_OLLAMA_MODEL to choose the model; otherwise the first pulled one is used.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import urllib.request
from typing import Any

import pytest

from tests.conftest import REPO, Project

HOST, PORT = "127.0.0.1", 11434
BASE_URL = f"http://{HOST}:{PORT}"


def _answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _model() -> str:
    chosen = os.environ.get("RUNNER_OLLAMA_MODEL")
    if chosen:
        return chosen
    try:
        with urllib.request.urlopen(f"{BASE_URL}/api/tags", timeout=2) as resp:
            models = json.load(resp).get("models") or []
    except (OSError, ValueError) as exc:
        pytest.skip(f"something answers on {HOST}:{PORT} but not as Ollama: {exc}")
    if not models:
        pytest.skip("the local Ollama has no model pulled")
    return str(models[0]["name"])


@pytest.fixture
def ollama_project(project: Project) -> Project:
    if not _answers(HOST, PORT):
        pytest.skip(f"no Ollama answers on {HOST}:{PORT}")
    for folder in ("pipelines", "prompts", "examples"):
        shutil.copytree(
            REPO / folder, project.root / folder, ignore=shutil.ignore_patterns(".runner", "out")
        )
    project.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "ollama"

        [providers.ollama]
        base_url = "{BASE_URL}"
        model = "{_model()}"
        timeout = 300
        """,
    )
    return project


def _apply(project: Project) -> dict[str, Any]:
    doc: dict[str, Any] = project.apply("--state", ".runner", file="pipelines/classify-ingest.yaml")
    return doc


@pytest.mark.live
def test_classify_ingest_on_local_ollama(ollama_project: Project) -> None:
    doc = _apply(ollama_project)
    assert doc["_exit"] == 7, (doc["_stderr"], doc.get("steps"))
    assert {s["id"]: s["status"] for s in doc["steps"]}["classify"] == "ran"
    run_id = doc["run"]["id"]
    decided = ollama_project.cli("decide", run_id, "review", "approve", "--state", ".runner")
    assert decided.exit_code == 0, decided.stderr
    done = _apply(ollama_project)
    assert done["_exit"] == 0, done["_stderr"]
    coll = ollama_project.cli(
        "collections", "show", "documents", "--state", ".runner", "--json"
    ).json
    assert coll["count"] == 3
    assert {d["metadata"]["label"] for d in coll["documents"]} <= {"invoice", "letter", "report"}
