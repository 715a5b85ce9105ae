"""Compliance profiles as data, and the report they produce."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from runner.errors import InvalidPipeline
from runner.state.canonical import canonical_json
from runner.steps.imaging.compliance import Measured, check, check_bytes, measure
from runner.steps.imaging.profiles import known_profiles, load_profile

YOUTUBE_LIMIT = 2 * 1024 * 1024


def test_shipped_profiles() -> None:
    assert known_profiles() == ["shorts", "square", "youtube"]
    yt = load_profile("youtube")
    assert (yt.width, yt.height, yt.max_bytes) == (1280, 720, YOUTUBE_LIMIT)
    assert yt.formats == ("jpg", "png", "gif")
    names = [r.name for r in yt.rules]
    assert names == ["width", "height", "aspect", "min_width", "bytes", "format"]
    assert (load_profile("shorts").width, load_profile("shorts").height) == (1080, 1920)
    assert (load_profile("square").width, load_profile("square").height) == (1080, 1080)


def test_profiles_are_compiled_once() -> None:
    assert load_profile("youtube") is load_profile("youtube")


def test_compliant_report_lists_every_rule() -> None:
    report = check(Measured(1280, 720, 600_000, "jpg"), load_profile("youtube"))
    assert report.compliant and report.reason == ""
    doc = report.to_json()
    assert doc["rules"] == [
        {"name": "width", "measured": 1280, "expected": "== 1280", "passed": True},
        {"name": "height", "measured": 720, "expected": "== 720", "passed": True},
        {"name": "aspect", "measured": 1.7778, "expected": "16:9 (1.7778 ± 0.01)", "passed": True},
        {"name": "min_width", "measured": 1280, "expected": ">= 640", "passed": True},
        {"name": "bytes", "measured": 600_000, "expected": "< 2097152", "passed": True},
        {"name": "format", "measured": "jpg", "expected": "jpg, png or gif", "passed": True},
    ]
    canonical_json(doc)  # storable as-is


def test_oversize_file_fails_with_exact_reason() -> None:
    report = check(Measured(1280, 720, 2_200_000, "jpg"), load_profile("youtube"))
    assert not report.compliant
    assert report.reason == "bytes 2200000 >= limit 2097152"
    assert [r.name for r in report.failed] == ["bytes"]


def test_exactly_the_limit_is_not_under_it() -> None:
    report = check(Measured(1280, 720, YOUTUBE_LIMIT, "png"), load_profile("youtube"))
    assert report.reason == "bytes 2097152 >= limit 2097152"


def test_wrong_size_and_format_fail_each_rule() -> None:
    report = check(Measured(600, 600, 1000, "webp"), load_profile("youtube"))
    assert report.reason == (
        "width 600 != 1280; height 600 != 720; aspect 1 is not 16:9; "
        "min_width 600 < minimum 640; format webp is not jpg, png or gif"
    )
    passed = {r.name: r.passed for r in report.rules}
    assert passed == {
        "width": False,
        "height": False,
        "aspect": False,
        "min_width": False,
        "bytes": True,
        "format": False,
    }


def test_real_bytes_are_measured() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (1080, 1920), (10, 20, 30)).save(buf, "PNG")
    measured = measure(buf.getvalue())
    assert measured == Measured(1080, 1920, len(buf.getvalue()), "png")
    assert check_bytes(buf.getvalue(), load_profile("shorts")).compliant
    assert not check_bytes(buf.getvalue(), load_profile("youtube")).compliant


def test_measure_refuses_non_images() -> None:
    with pytest.raises(ValueError, match="cannot measure image"):
        measure(b"nope")


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(InvalidPipeline, match=r"unknown compliance profile 'tiktok'") as info:
        load_profile("tiktok")
    assert "known: shorts, square, youtube" in str(info.value)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """
name: banner
width: 1500
height: 500
max_bytes: 1000000
formats: [png]
rules:
  - {name: width, expr: width == 1500, expect: "== 1500"}
"""


def test_profile_from_a_path_and_relative_to_a_root(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    profile = load_profile(path)
    assert (profile.name, profile.width, profile.source) == ("banner", 1500, str(path))
    assert load_profile("p.yaml", root=tmp_path).digest == profile.digest
    report = check(Measured(1400, 500, 10, "png"), profile)
    assert report.reason == "width 1400 (expected == 1500)"


def test_profile_path_cannot_escape_the_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipeline, match="escapes"):
        load_profile("../elsewhere.yaml", root=tmp_path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("formats: [png]", "formats: [png]\ncolour: red"), "unknown key(s) colour"),
        (("width: 1500\n", ""), "missing key(s) width"),
        (("width: 1500", "width: -3"), "'width' must be a positive integer"),
        (("formats: [png]", "formats: [bmp]"), "'formats' must be a non-empty list"),
        (("expr: width == 1500", "expr: colour == 1"), "reads unknown name(s) colour"),
        (("expr: width == 1500", "expr: width == = 1500"), "invalid expression"),
        (('expect: "== 1500"', 'expect: "== 1500", hint: x'), "unknown key(s) hint"),
    ],
)
def test_malformed_profiles_are_refused(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    path = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(InvalidPipeline) as info:
        load_profile(path)
    assert message in str(info.value)


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipeline, match="cannot read compliance profile"):
        load_profile(tmp_path / "absent.yaml")
