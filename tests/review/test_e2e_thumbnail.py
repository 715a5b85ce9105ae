"""The thumbnail workflow end to end against hostile inputs: a broken image from a provider,
ids that try to escape the export folder, and finals that cannot be made compliant."""

from __future__ import annotations

import base64
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.conftest import REPO, Project
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Recorded, Reply, b64


@pytest.fixture
def thumbs(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    (tmp_path / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", tmp_path / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", tmp_path / "prompts" / "thumbnail")
    return proj


def apply(p: Project, *args: str) -> dict[str, Any]:
    res = p.cli("apply", "pipelines/thumbnail.yaml", "--json", "-q", "--state", ".runner", *args)
    doc: dict[str, Any] = res.json
    doc["_exit"] = res.exit_code
    doc["_stderr"] = res.stderr
    return doc


class TruncatingServer(OpenAIServer):
    """Answers the ``bad``-th image generation with a PNG cut off half way."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.bad = bad
        self.generations = 0
        self._n_lock = threading.Lock()

    def _generate(self, rec: Recorded) -> Reply:
        reply = super()._generate(rec)
        with self._n_lock:
            self.generations += 1
            nth = self.generations
        if nth == self.bad:
            whole = base64.b64decode(reply.body["data"][0]["b64_json"])
            reply.body["data"][0]["b64_json"] = b64(whole[: len(whole) // 2])
        return reply


def _openai_config(p: Project, url: str) -> None:
    p.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "openai"

        [providers.openai]
        base_url = "{url}/v1"
        timeout = 10
        """,
    )


SMALL = ("-p", "concurrency=1", "-p", "size=640x360")


def _broken_one(doc: dict[str, Any]) -> dict[str, Any]:
    """The one failed iteration, after checking the other three are complete and compliant."""
    failed: list[dict[str, Any]] = [it for it in doc["iterations"] if it["status"] == "failed"]
    done = [it for it in doc["iterations"] if it["status"] == "completed"]
    assert len(failed) == 1 and len(done) == 3, doc["iterations"]
    for it in done:
        assert it["compliant"] is True
        with Image.open(it["final_path"]) as img:
            assert img.size == (1280, 720) and img.format == "JPEG"
    return failed[0]


def test_truncated_raw_image_fails_only_its_iteration(thumbs: Project) -> None:
    server = TruncatingServer(bad=2)
    with server:
        _openai_config(thumbs, server.url)
        doc = apply(thumbs, *SMALL)
    assert server.generations == 4
    assert doc["_exit"] == 6 and doc["exit_code"] == 6, doc["_stderr"]
    reason = _broken_one(doc)["error"] or ""
    assert "image" in reason and "truncated" in reason, reason


def test_truncated_raw_image_is_not_kept_as_a_paid_call(thumbs: Project) -> None:
    """Forcing the step again asks only for the broken image, instead of reusing its bytes."""
    server = TruncatingServer(bad=2)
    with server:
        _openai_config(thumbs, server.url)
        first = apply(thumbs, *SMALL)
        broken = _broken_one(first)
        forced = apply(thumbs, *SMALL, "--force", "generate")
    assert forced["_exit"] == 0, forced["iterations"]
    assert server.generations == 5  # the three good calls were reused
    again = {it["ordinal"]: it for it in forced["iterations"]}[broken["ordinal"]]
    assert again["idempotency_key"] == broken["idempotency_key"]


def test_reapply_retries_a_failed_iteration(thumbs: Project) -> None:
    server = TruncatingServer(bad=2)
    with server:
        _openai_config(thumbs, server.url)
        _broken_one(apply(thumbs, *SMALL))
        again = apply(thumbs, *SMALL)
    assert again["_exit"] == 0 and server.generations == 5


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_hostile_ids_never_write_outside_the_export_folder(tmp_path: Path) -> None:
    # The project sits a few folders deep so "../.." escapes would still land inside tmp_path.
    root = tmp_path / "a" / "b" / "c" / "proj"
    (root / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    proj = Project(root)
    before = _files_under(tmp_path)
    hostile = [
        "../../escape",
        "a/../../b",
        "..",
        str(tmp_path / "abs" / "path"),
        "..\\..\\win",
        "-rf",
    ]
    allowed: list[Path] = [root / ".runner"]
    for i, video_id in enumerate(hostile):
        out, delivered = root / f"out{i}", root / f"delivered{i}"
        doc = apply(
            proj,
            "-p",
            f"video_id={video_id}",
            "-p",
            "n=2",
            "-p",
            "size=64x36",
            "--out",
            str(delivered),
        )
        if doc["_exit"] == 2:  # a clean refusal is acceptable
            assert "Traceback" not in doc["_stderr"]
            continue
        assert doc["_exit"] == 0, (video_id, doc["_stderr"])
        allowed += [out, delivered]
        res = proj.cli("export", doc["run"]["id"], "--to", str(out), "--json", "--state", ".runner")
        assert res.exit_code == 0, (video_id, res.stderr)
        written = [Path(f) for f in res.json["files"]]
        assert len(written) == 2
        for f in written:
            assert f.resolve().parent == out.resolve(), (video_id, f)
            assert f.name.endswith((".jpg", ".png")) and not f.name.startswith(".")
        assert sorted(p.name for p in delivered.iterdir()) == sorted(f.name for f in written)
    created = _files_under(tmp_path) - before
    stray = sorted(
        str(p.relative_to(tmp_path))
        for p in created
        if not any(p.is_relative_to(a) for a in allowed)
    )
    assert stray == []
    assert not (tmp_path / "abs").exists() and not (tmp_path / "a" / "b" / "escape").exists()


TINY_PROFILE = """\
name: tiny
description: An impossible target, 1280x720 in under 400 bytes
width: 1280
height: 720
max_bytes: 400
formats: [jpg]
rules:
  - name: bytes
    expr: bytes < 400
    expect: "< 400"
    fail: ">= limit 400"
"""


def _with_profile_file(p: Project) -> None:
    """The shipped pipeline with its profile param opened up to a profile file (a user's edit)."""
    pipeline = p.root / "pipelines" / "thumbnail.yaml"
    text = pipeline.read_text(encoding="utf-8")
    assert "enum: [youtube, shorts, square], " in text
    pipeline.write_text(text.replace("enum: [youtube, shorts, square], ", ""), encoding="utf-8")
    p.write("profiles/tiny.yaml", TINY_PROFILE)


def test_compliance_only_failures_exit_5(thumbs: Project) -> None:
    # No packaged profile can fail: finalize always reaches the exact size, and a 1280x720 JPEG
    # is far under 2 MB. A profile file with an impossible byte limit is the natural way.
    _with_profile_file(thumbs)
    doc = apply(thumbs, "-p", "profile=profiles/tiny.yaml", "-p", "n=2", "-p", "size=640x360")
    assert doc["_exit"] == 5 and doc["exit_code"] == 5, doc["_stderr"]
    for it in doc["iterations"]:
        assert it["status"] == "failed" and it["compliant"] is False
        assert (it["error"] or "").startswith("compliance:") and "400" in it["error"]
        assert Path(it["final_path"]).is_file()  # kept so it can be inspected


def test_mixed_failures_are_not_compliance_only(thumbs: Project) -> None:
    _with_profile_file(thumbs)
    with TruncatingServer(bad=1) as server:
        _openai_config(thumbs, server.url)
        doc = apply(thumbs, "-p", "profile=profiles/tiny.yaml", "-p", "n=2", *SMALL)
    assert doc["_exit"] == 4 and doc["exit_code"] == 4, doc["_stderr"]
    errors = sorted(it["error"] or "" for it in doc["iterations"])
    assert errors[0].startswith("compliance:") and "truncated" in errors[1], errors


def test_a_failing_step_after_finalize_is_not_a_completed_run(thumbs: Project) -> None:
    pipeline = thumbs.root / "pipelines" / "thumbnail.yaml"
    text = pipeline.read_text(encoding="utf-8")
    publish = '  publish:\n    uses: shell\n    needs: [final]\n    with: {run: "exit 3"}\n'
    pipeline.write_text(text.replace("\ntests:\n", f"\n{publish}tests:\n"), encoding="utf-8")
    doc = apply(thumbs, "-p", "n=2", "-p", "size=640x360")
    assert {s["id"]: s["status"] for s in doc["steps"]}["publish"] == "failed"
    assert [it["status"] for it in doc["iterations"]] == ["completed", "completed"]
    assert doc["_exit"] == 6 and doc["exit_code"] == 6 and doc["run"]["status"] != "completed"
