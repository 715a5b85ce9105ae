"""The finalize step over a real object store."""

from __future__ import annotations

import asyncio
import io
import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from runner.errors import InvalidPipeline, StepFailure
from runner.state.objects import ObjectStore
from runner.steps.base import StepContext, StepEnv, StepResult
from runner.steps.finalize import FinalizeStep
from runner.steps.imaging.profiles import load_profile


def _raw(seed: int) -> bytes:
    img = Image.new("RGB", (1536, 1024), (20 * seed, 80, 160))
    ImageDraw.Draw(img).ellipse((300, 200, 1200, 900), fill=(240, 200, 40))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _noise() -> bytes:
    rng = random.Random(3)
    buf = io.BytesIO()
    Image.frombytes("RGB", (640, 360), rng.randbytes(640 * 360 * 3)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def ctx(tmp_path: Path) -> StepContext:
    env = StepEnv(
        root=tmp_path,
        state_dir=tmp_path / ".runner",
        objects=ObjectStore(tmp_path / ".runner" / "objects"),
    )
    lines: list[str] = []
    return StepContext(env=env, run_id="run1", step_id="finals", log=lines.append)


def _iteration(ctx: StepContext, ordinal: int, data: bytes, **extra: Any) -> dict[str, Any]:
    return {
        "ordinal": ordinal,
        "seed": ordinal - 1,
        "idempotency_key": f"key{ordinal:02d}" * 4,
        "raw": ctx.objects.put_bytes(data),
        "status": "completed",
        **extra,
    }


def _run(ctx: StepContext, args: dict[str, Any]) -> StepResult:
    return asyncio.run(FinalizeStep().run(ctx, args))


def test_one_corrupt_raw_fails_alone(ctx: StepContext) -> None:
    iterations = [
        _iteration(ctx, 1, _raw(1), prompt="a cat"),
        _iteration(ctx, 2, b"\x89PNG\r\n\x1a\n this is not really a png"),
        _iteration(ctx, 3, _raw(3)),
    ]
    result = _run(ctx, {"iterations": iterations, "title": "Big Reveal", "profile": "youtube"})
    out = result.output
    assert out["profile"] == "youtube"
    by_ordinal = {e["ordinal"]: e for e in out["iterations"]}
    assert [e["status"] for e in out["iterations"]] == ["completed", "failed", "completed"]

    bad = by_ordinal[2]
    assert bad["final"] is None and bad["failure"] == "finalize"
    assert bad["error"].startswith("finalize: cannot read image")

    for ordinal in (1, 3):
        entry = by_ordinal[ordinal]
        assert entry["seed"] == ordinal - 1 and entry["idempotency_key"].startswith("key")
        assert entry["compliant"] is True and entry["error"] is None
        assert entry["compliance"]["compliant"] is True
        assert {r["name"] for r in entry["compliance"]["rules"]} >= {"width", "bytes", "format"}
        assert entry["ext"] == "jpg"
        with Image.open(ctx.objects.path(entry["final"])) as final:
            assert (final.format, final.size) == ("JPEG", (1280, 720))
    assert by_ordinal[1]["prompt"] == "a cat"  # upstream fields travel along

    expected = {
        iterations[0]["raw"],
        by_ordinal[1]["final"],
        iterations[2]["raw"],
        by_ordinal[3]["final"],
        iterations[1]["raw"],
    }
    assert set(result.artifacts) == expected
    assert result.report == {"completed": 2, "failed": 1, "compliance_failed": 0}


def test_upstream_failures_pass_through(ctx: StepContext) -> None:
    iterations = [
        _iteration(ctx, 1, _raw(1)),
        {"ordinal": 2, "seed": 1, "raw": None, "status": "failed", "error": "provider refused"},
    ]
    out = _run(ctx, {"iterations": iterations}).output
    assert out["iterations"][1]["status"] == "failed"
    assert out["iterations"][1]["error"] == "provider refused"
    assert out["iterations"][1]["failure"] == "upstream"


def _tight_profile(root: Path) -> str:
    (root / "profiles").mkdir()
    (root / "profiles" / "tight.yaml").write_text(
        """
name: tight
width: 640
height: 360
max_bytes: 3000
formats: [jpg]
rules:
  - {name: bytes, expr: bytes < 3000, expect: "< 3000", fail: ">= limit 3000"}
""",
        encoding="utf-8",
    )
    return "profiles/tight.yaml"


def test_non_compliant_finals_are_stored_and_fail_as_check_failures(ctx: StepContext) -> None:
    profile = _tight_profile(ctx.root)
    iterations = [_iteration(ctx, 1, _noise()), _iteration(ctx, 2, _raw(2))]
    before = set(ctx.objects.iter_digests())
    with pytest.raises(StepFailure) as info:
        _run(ctx, {"iterations": iterations, "profile": profile})
    assert info.value.check is True
    assert info.value.reason.startswith("all 2 iterations failed: #1 compliance: bytes ")
    assert ">= limit 3000" in info.value.reason
    stored = set(ctx.objects.iter_digests()) - before
    assert len(stored) >= 1  # the non-compliant finals are kept for inspection
    for digest in stored:
        with Image.open(ctx.objects.path(digest)) as final:
            assert final.size == (640, 360)


def test_mixed_failures_are_not_check_failures(ctx: StepContext) -> None:
    profile = _tight_profile(ctx.root)
    iterations = [_iteration(ctx, 1, _noise()), _iteration(ctx, 2, b"garbage")]
    with pytest.raises(StepFailure) as info:
        _run(ctx, {"iterations": iterations, "profile": profile})
    assert info.value.check is False
    assert "#2 finalize: cannot read image" in info.value.reason


def test_a_single_image(ctx: StepContext) -> None:
    digest = ctx.objects.put_bytes(_raw(5))
    result = _run(ctx, {"image": digest, "profile": "square", "format": "png"})
    assert result.output["compliant"] is True and result.output["ext"] == "png"
    with Image.open(ctx.objects.path(result.output["final"])) as final:
        assert (final.format, final.size) == ("PNG", (1080, 1080))


def test_a_missing_raw_object_fails_that_iteration(ctx: StepContext) -> None:
    iterations = [_iteration(ctx, 1, _raw(1)), {"ordinal": 2, "raw": "ab" * 32}]
    out = _run(ctx, {"iterations": iterations}).output
    assert out["iterations"][1]["status"] == "failed"
    assert "missing from the store" in out["iterations"][1]["error"]


def test_unknown_profile_at_run_and_compile_time(ctx: StepContext) -> None:
    step = FinalizeStep()
    with pytest.raises(InvalidPipeline, match="known: shorts, square, youtube"):
        _run(ctx, {"image": "ab" * 32, "profile": "tiktok"})
    with pytest.raises(InvalidPipeline, match="known: shorts, square, youtube"):
        step.validate({"image": "x", "profile": "tiktok"}, root=ctx.root, where=None)
    with pytest.raises(InvalidPipeline, match="exactly one of"):
        step.validate({"image": "x", "iterations": []}, root=ctx.root, where=None)
    step.validate(
        {"iterations": "${{ steps.gen.output.iterations }}", "profile": "${{ p }}"},
        root=ctx.root,
        where=None,
    )


def test_key_parts(ctx: StepContext) -> None:
    step = FinalizeStep()
    profile = _tight_profile(ctx.root)
    assert step.reads({"profile": profile}, root=ctx.root) == [profile]
    assert step.reads({}, root=ctx.root) == []
    extra = step.key_extra({}, ctx.env)
    assert extra["profile"] == load_profile("youtube").digest and "pillow" in extra
