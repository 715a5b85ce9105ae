"""A team's remote cache over a real S3-protocol server (moto_server on 127.0.0.1).

Two clones of one project, each with its own .runner state, share one remote: the second makes
no provider call (counted by the OpenAI-protocol server) and gets byte-identical finals. A
damaged remote object is reported, ignored and repaired; an unreachable remote costs one
warning; picks and gate decisions never travel.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from tests.conftest import REPO, runner_bin
from tests.providers.openai_server import OpenAIServer
from tests.state.remote.s3server import S3Server, free_port

GENERATIONS = ("POST", "/v1/images/generations")


def _clone(root: Path, url: str, remote: str, *, writable: bool = True) -> Path:
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{url}/v1"
            image_model = "test-image"
            api_key_env = "TEST_OPENAI_KEY"
            timeout = 10

            [cache]
            remote = "{remote}"
            writable = {"true" if writable else "false"}
            """
        ),
        encoding="utf-8",
    )
    return root


def _run(root: Path, s3: S3Server, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    full.update(s3.env(), NO_COLOR="1", TEST_OPENAI_KEY="sk-remote-test-0123456789", **env)
    return subprocess.run(
        [*runner_bin(), *args],
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _apply(root: Path, s3: S3Server, **env: str) -> dict[str, Any]:
    res = _run(
        root, s3, "apply", "pipelines/thumbnail.yaml", "--json", "-q", "--state", ".runner", **env
    )
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    doc["_stderr"] = res.stderr
    assert res.returncode == doc["exit_code"]
    return doc


def _finals(root: Path, run_id: str) -> dict[str, str]:
    run_dir = root / ".runner" / "runs" / run_id
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir())}


def test_a_second_clone_makes_no_provider_call_and_gets_identical_finals(
    tmp_path: Path, s3: S3Server
) -> None:
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/team"
    with OpenAIServer() as server:
        a = _clone(tmp_path / "a", server.url, remote)
        b = _clone(tmp_path / "b", server.url, remote)
        first = _apply(a, s3)
        assert first["exit_code"] == 0, first
        assert server.count(*GENERATIONS) == 4
        pick = _run(a, s3, "pick", first["run"]["id"], "2", "--state", ".runner")
        assert pick.returncode == 0, pick.stderr

        second = _apply(b, s3)
        assert second["exit_code"] == 0, second
        assert server.count(*GENERATIONS) == 4  # not one call more
    assert {s["id"]: s["status"] for s in second["steps"]} == {
        "prompt": "cached",
        "generate": "cached",
        "final": "cached",
    }
    assert _finals(a, first["run"]["id"]) == _finals(b, second["run"]["id"])
    assert len(_finals(b, second["run"]["id"])) == 4
    # A pick is a person's decision, not cache: the second clone has none.
    assert not any(it.get("picked") for it in second["iterations"])
    for root in (a, b):
        verify = _run(root, s3, "verify", "--state", ".runner", "--json")
        assert verify.returncode == 0, verify.stdout + verify.stderr
    # The second clone journaled the results: its next apply needs neither remote nor provider.
    again = _run(
        b,
        s3,
        "apply",
        "pipelines/thumbnail.yaml",
        "--json",
        "-q",
        "--state",
        ".runner",
        RUNNER_S3_ENDPOINT=f"http://127.0.0.1:{free_port()}",
    )
    assert json.loads(again.stdout)["exit_code"] == 0
    assert "warning" not in again.stderr
    # Nothing in the remote names a local path.
    for key in s3.objects(bucket, "team/records/"):
        text = s3.get(bucket, key).decode()
        assert str(tmp_path) not in text and os.path.expanduser("~") not in text
        assert json.loads(text)["runner_version"]


def test_a_damaged_remote_object_is_ignored_reported_and_repaired(
    tmp_path: Path, s3: S3Server
) -> None:
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/team"
    with OpenAIServer() as server:
        a = _clone(tmp_path / "a", server.url, remote)
        assert _apply(a, s3)["exit_code"] == 0
        records = {k: json.loads(s3.get(bucket, k)) for k in s3.objects(bucket, "team/records/")}
        generate = next(r for r in records.values() if r["step_type"].startswith("image@"))
        victim = sorted(generate["artifacts"])[0]
        path = f"team/objects/{victim[:2]}/{victim[2:]}"
        s3.put(bucket, path, b"not the image any more")

        b = _clone(tmp_path / "b", server.url, remote)
        doc = _apply(b, s3)
        assert doc["exit_code"] == 0, doc
        assert "damaged" in doc["_stderr"] and victim[:12] in doc["_stderr"]
        statuses = {s["id"]: s["status"] for s in doc["steps"]}
        assert statuses["generate"] == "ran"  # the damaged record was not used
        assert server.count(*GENERATIONS) == 8
    assert hashlib.sha256(s3.get(bucket, path)).hexdigest() == victim  # repaired


def test_an_unreachable_remote_costs_one_warning(tmp_path: Path, s3: S3Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with OpenAIServer() as server:
        a = _clone(tmp_path / "a", server.url, "s3://nowhere/team")
        doc = _apply(a, s3, RUNNER_S3_ENDPOINT=dead)
        assert server.count(*GENERATIONS) == 4
    assert doc["exit_code"] == 0, doc
    warnings = [line for line in doc["_stderr"].splitlines() if "warning" in line]
    assert len(warnings) == 1 and "remote cache unavailable" in warnings[0], doc["_stderr"]


def test_a_read_only_remote_is_read_but_never_written(tmp_path: Path, s3: S3Server) -> None:
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/team"
    with OpenAIServer() as server:
        a = _clone(tmp_path / "a", server.url, remote, writable=False)
        assert _apply(a, s3)["exit_code"] == 0
        assert s3.objects(bucket) == {}
        push = _run(a, s3, "cache", "push", "--state", ".runner")
        assert push.returncode != 0 and "read-only" in push.stderr
        # Made writable, `runner cache push` shares what the apply made.
        w = _clone(tmp_path / "w", server.url, remote, writable=True)
        shutil.copytree(a / ".runner", w / ".runner")
        pushed = _run(w, s3, "cache", "push", "--state", ".runner", "--json")
        assert pushed.returncode == 0, pushed.stderr
        doc = json.loads(pushed.stdout)
        assert doc["pushed"] == 3 and doc["in_remote"] == 3
        status = json.loads(_run(w, s3, "cache", "status", "--state", ".runner", "--json").stdout)
        assert status["in_remote"] == status["local_results"] == 3
        # A fresh clone pulls every result without a provider call.
        c = _clone(tmp_path / "c", server.url, remote, writable=False)
        pulled = _run(
            c, s3, "cache", "pull", "pipelines/thumbnail.yaml", "--state", ".runner", "--json"
        )
        assert pulled.returncode == 0, pulled.stderr
        assert json.loads(pulled.stdout)["summary"]["cached"] == 3
        assert server.count(*GENERATIONS) == 4
