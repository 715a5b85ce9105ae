"""``[executor]`` in runner.toml: a project can say its step bodies run on Dask; the command
line wins; a bad table is refused at file:line:column before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = (
    "runner: 1\nname: cfg\nsteps:\n  each:\n    uses: shell\n"
    "    for_each: [1, 2, 3, 4]\n"
    "    with:\n"
    '      run: "echo ${{ item }} > out/e${{ item }}.txt"\n'
    '      outputs: ["out/e${{ item }}.txt"]\n'
)


def _project(root: Path, toml: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    (root / "runner.toml").write_text(toml, encoding="utf-8")
    return root


def _apply(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--state", ".runner", *extra],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _workers(events: Path) -> list[str | None]:
    docs = [json.loads(line) for line in events.read_text().splitlines()]
    return [d.get("worker") for d in docs if d["type"] == "StepPassed" and d["step"] == "each"]


def test_a_project_whose_runner_toml_says_dask_runs_on_dask(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    root = _project(
        tmp_path / "p",
        '[general]\ndefault_provider = "fake"\n\n[executor]\nkind = "dask"\nworkers = 2\n'
        "threads = 2\n",
    )
    res = _apply(root, "--json", "-q", "--events", "events.jsonl")
    assert res.returncode == 0, res.stderr
    where = _workers(root / "events.jsonl")
    assert len(where) == 4
    assert all(w is not None and w.startswith("tcp://127.0.0.1:") for w in where)
    assert sorted((root / "out").iterdir()) == [root / "out" / f"e{i}.txt" for i in range(1, 5)]


def test_the_command_line_wins_over_runner_toml(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", '[executor]\nkind = "dask"\nworkers = 2\n')
    res = _apply(root, "--json", "-q", "--executor", "local", "--events", "events.jsonl")
    assert res.returncode == 0, res.stderr
    assert _workers(root / "events.jsonl") == [None] * 4  # ran here: no worker recorded


@pytest.mark.parametrize(
    ("toml", "line", "column", "message"),
    [
        ('[executor]\nkind = "cluster"\n', 2, 8, "kind must be one of local, dask"),
        ("[executor]\nkind = 'dask'\nworkers = 0\n", 3, 11, "workers must be at least 1"),
        ('[executor]\nthreads = "4"\n', 2, 11, "threads must be a whole number"),
        ("[executor]\nworkers = true\n", 2, 11, "workers must be a whole number"),
        ("# comment\n[executor]\nnodes = 3\n", 3, 1, "unknown key 'nodes'"),
        ('[executor]\nscheduler = "localhost"\n', 2, 13, "scheduler must be an address"),
        (
            '[executor]\nkind = "dask"\nscheduler = "tcp://h:8786"\nworkers = 2\n',
            4,
            11,
            "workers starts a local cluster: not with scheduler",
        ),
        ('[cache]\nremote = "s3://b/p"\n\n[executor]\nkind = 3\n', 5, 8, "kind must be one of"),
        ("executor = 3\n", 0, 0, "[executor] must be a table"),
    ],
)
def test_a_bad_executor_table_is_refused_at_its_place(
    tmp_path: Path, toml: str, line: int, column: int, message: str
) -> None:
    root = _project(tmp_path / "p", toml)
    res = _apply(root, "-q")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert message in res.stderr
    place = "runner.toml" + (f":{line}:{column}" if line else "")
    assert place in res.stderr
    assert not (root / "out").exists()  # refused before anything ran


def test_cluster_options_without_dask_anywhere_are_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", '[general]\ndefault_provider = "fake"\n')
    res = _apply(root, "-q", "--workers", "2")
    assert res.returncode == 2
    assert "go with --executor dask" in res.stderr
    assert "Traceback" not in res.stderr
