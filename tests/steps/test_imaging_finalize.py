"""finalize: every source shape and mode becomes a compliant final for every shipped profile."""

from __future__ import annotations

import functools
import io
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image, ImageChops, ImageDraw

from runner.steps.imaging.compliance import measure
from runner.steps.imaging.finalize import (
    Finalized,
    FinalizeError,
    finalize,
    fit_title,
    wrap,
)
from runner.steps.imaging.profiles import Profile, known_profiles, load_profile

TITLE = "Never gonna give you up: the definitive ranking of every chorus"


def _scene(size: tuple[int, int]) -> Image.Image:
    """A picture with structure (gradient, shapes) so resizing and cropping are visible."""
    w, h = size
    img = Image.linear_gradient("L").resize(size).convert("RGB")
    draw = ImageDraw.Draw(img)
    draw.ellipse((w * 0.2, h * 0.2, w * 0.8, h * 0.8), fill=(200, 60, 40))
    draw.rectangle((0, 0, max(0, w // 10), max(0, h // 10)), fill=(30, 90, 200))
    return img


def _encode(img: Image.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def _tiny() -> bytes:
    return _encode(_scene((3, 2)), "PNG")


def _huge() -> bytes:
    return _encode(_scene((6000, 4000)), "JPEG", quality=80)


def _portrait() -> bytes:
    return _encode(_scene((900, 1600)), "PNG", compress_level=1)


def _panorama() -> bytes:
    return _encode(_scene((4000, 500)), "PNG", compress_level=1)


def _rgba() -> bytes:
    img = _scene((800, 600)).convert("RGBA")
    img.putalpha(Image.linear_gradient("L").resize((800, 600)))
    return _encode(img, "PNG", compress_level=1)


def _palette() -> bytes:
    img = _scene((640, 480)).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    return _encode(img, "PNG", transparency=0)


def _cmyk() -> bytes:
    return _encode(_scene((1024, 768)).convert("CMYK"), "JPEG", quality=85)


def _sixteen_bit() -> bytes:
    grey = Image.linear_gradient("L").resize((700, 500)).convert("I")
    wide = grey.point(lambda v: v * 257).convert("I;16")
    assert wide.mode == "I;16"
    return _encode(wide, "PNG")


def _grey_alpha() -> bytes:
    img = _scene((500, 500)).convert("LA")
    return _encode(img, "PNG")


def _one_bit() -> bytes:
    return _encode(_scene((640, 360)).convert("1"), "PNG")


SOURCES: dict[str, Callable[[], bytes]] = {
    "tiny-3x2": _tiny,
    "huge-6000x4000": _huge,
    "portrait": _portrait,
    "panorama-4000x500": _panorama,
    "rgba": _rgba,
    "palette-P": _palette,
    "cmyk": _cmyk,
    "16-bit-I;16": _sixteen_bit,
    "LA": _grey_alpha,
    "1-bit": _one_bit,
}


@functools.cache
def source(name: str) -> bytes:
    return SOURCES[name]()


def _open(fin: Finalized) -> Image.Image:
    img = Image.open(io.BytesIO(fin.data))
    img.load()
    return img


@pytest.mark.parametrize("profile_name", known_profiles())
@pytest.mark.parametrize("source_name", list(SOURCES))
def test_every_source_becomes_a_compliant_final(source_name: str, profile_name: str) -> None:
    profile = load_profile(profile_name)
    fin = finalize(source(source_name), profile, title=TITLE)
    assert (fin.width, fin.height) == (profile.width, profile.height)
    assert fin.bytes_len == len(fin.data) < profile.max_bytes
    measured = measure(fin.data)
    assert (measured.width, measured.height) == (profile.width, profile.height)
    assert measured.format in profile.formats
    assert fin.report.compliant, fin.report.reason
    img = _open(fin)
    assert img.mode == "RGB" and img.size == (profile.width, profile.height)


def _noise(size: tuple[int, int], seed: int = 7) -> Image.Image:
    rng = random.Random(seed)
    return Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))


def test_noisy_png_over_the_limit_falls_back_to_a_jpeg_under_2_mb() -> None:
    raw = _encode(_noise((1280, 720)), "PNG")
    profile = load_profile("youtube")
    assert len(raw) > profile.max_bytes  # the premise: a lossless noisy frame is too big
    fin = finalize(raw, profile, fmt="png")
    assert fin.format == "jpeg" and fin.ext == "jpg"
    assert fin.bytes_len < 2 * 1024 * 1024
    assert fin.report.compliant
    assert any("encoded as jpeg" in note for note in fin.notes)


def _profile_file(tmp_path: Path, *, max_bytes: int, formats: str = "[jpg, png]") -> Profile:
    path = tmp_path / "tight.yaml"
    path.write_text(
        f"""
name: tight
width: 640
height: 360
max_bytes: {max_bytes}
formats: {formats}
rules:
  - {{name: bytes, expr: "bytes < {max_bytes}", expect: "< {max_bytes}",
      fail: ">= limit {max_bytes}"}}
  - {{name: width, expr: width == 640, expect: "== 640", fail: "!= 640"}}
""",
        encoding="utf-8",
    )
    return load_profile(path)


def test_jpeg_quality_is_searched_down_until_the_file_fits(tmp_path: Path) -> None:
    raw = _encode(_noise((640, 360)), "PNG")
    at_top = finalize(raw, _profile_file(tmp_path, max_bytes=10_000_000))
    assert at_top.quality == 92
    limit = at_top.bytes_len * 2 // 3
    fin = finalize(raw, _profile_file(tmp_path, max_bytes=limit))
    assert fin.quality is not None and 30 <= fin.quality < 92
    assert fin.bytes_len < limit
    assert fin.report.compliant


def test_an_impossible_limit_gives_a_non_compliant_report_not_an_error(tmp_path: Path) -> None:
    fin = finalize(_encode(_noise((640, 360)), "PNG"), _profile_file(tmp_path, max_bytes=2000))
    assert (fin.width, fin.height) == (640, 360)
    assert not fin.report.compliant
    assert fin.report.reason == f"bytes {fin.bytes_len} >= limit 2000"


def test_png_stays_png_when_the_profile_does_not_allow_jpg(tmp_path: Path) -> None:
    profile = _profile_file(tmp_path, max_bytes=5000, formats="[png]")
    fin = finalize(_encode(_noise((640, 360)), "PNG"), profile)
    assert fin.format == "png" and fin.quality is None
    assert not fin.compliant


def test_exif_orientation_is_applied_before_cropping() -> None:
    # Stored landscape: left half red, right half blue. Orientation 6 means "rotate 90° clockwise
    # to display", which puts the left (red) half on top.
    img = Image.new("RGB", (400, 200), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 200, 200))
    exif = Image.Exif()
    exif[0x0112] = 6
    raw = _encode(img, "JPEG", exif=exif, quality=95)
    fin = finalize(raw, load_profile("square"), fmt="png")
    out = _open(fin)
    top = out.getpixel((540, 100))
    bottom = out.getpixel((540, 980))
    assert isinstance(top, tuple) and isinstance(bottom, tuple)
    assert top[0] > 200 and top[2] < 60, top
    assert bottom[2] > 200 and bottom[0] < 60, bottom


def test_transparency_is_flattened_onto_white() -> None:
    raw = _encode(Image.new("RGBA", (300, 300), (255, 0, 0, 0)), "PNG")
    out = _open(finalize(raw, load_profile("square"), fmt="png"))
    assert out.getpixel((540, 540)) == (255, 255, 255)


def test_sixteen_bit_grey_keeps_its_tone() -> None:
    raw = _encode(Image.new("I;16", (64, 64), 32768), "PNG")
    out = _open(finalize(raw, load_profile("square"), fmt="png"))
    pixel = out.getpixel((540, 540))
    assert isinstance(pixel, tuple)
    assert all(120 <= c <= 135 for c in pixel), pixel  # mid grey, not clipped to white


def test_title_overlay_changes_the_title_region_only() -> None:
    raw = source("portrait")
    profile = load_profile("youtube")
    plain = _open(finalize(raw, profile, fmt="png"))
    titled = _open(finalize(raw, profile, title="Big Reveal Tonight", fmt="png"))
    diff = ImageChops.difference(plain, titled).convert("L")
    top_half = diff.crop((0, 0, 1280, 360))
    bottom_third = diff.crop((0, 480, 1280, 720))
    assert top_half.getbbox() is None  # untouched above the title box
    changed = sum(bottom_third.histogram()[41:])  # pixels that moved by more than 40 levels
    assert changed > 1280 * 240 * 0.05


def test_blank_title_draws_nothing() -> None:
    raw = source("tiny-3x2")
    profile = load_profile("square")
    assert (
        finalize(raw, profile, title="   ", fmt="png").data
        == finalize(raw, profile, fmt="png").data
    )


def test_title_is_wrapped_and_sized_to_fit_its_box() -> None:
    layout = fit_title(TITLE * 2, 1000, 220, min_size=16, max_size=120)
    assert len(layout.lines) > 1
    assert layout.height <= 220
    from PIL import ImageFont

    font = ImageFont.load_default(size=layout.size)
    assert all(font.getlength(line) <= 1000 for line in layout.lines)
    # A larger size would not fit: the search found the biggest one.
    bigger = fit_title(TITLE * 2, 1000, 220, min_size=layout.size + 1, max_size=layout.size + 1)
    assert bigger.size == layout.size + 1 and bigger.lines[-1].endswith("...")


def test_a_word_longer_than_a_line_is_broken() -> None:
    from PIL import ImageFont

    font = ImageFont.load_default(size=40)
    assert isinstance(font, ImageFont.FreeTypeFont)
    lines = wrap("Supercalifragilisticexpialidocious", font, 200)
    assert len(lines) > 1 and "".join(lines) == "Supercalifragilisticexpialidocious"
    assert all(font.getlength(line) <= 200 for line in lines)


def _truncated(fmt: str) -> bytes:
    data = _encode(_scene((400, 300)), fmt)
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", "no bytes"),
        (b"this is not an image at all", "not a recognised image format"),
        (_truncated("PNG"), "truncated"),
        (_truncated("JPEG"), "truncated"),
    ],
    ids=["empty", "garbage", "truncated-png", "truncated-jpeg"],
)
def test_corrupt_or_truncated_input_raises_finalize_error(raw: bytes, expected: str) -> None:
    with pytest.raises(FinalizeError, match="cannot read image") as info:
        finalize(raw, load_profile("youtube"))
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_oversized_dimensions_are_refused_before_decoding() -> None:
    huge = _encode(Image.new("1", (12000, 6000)), "PNG")  # 72M pixels, a tiny file
    with pytest.raises(FinalizeError, match="12000x6000 pixels is over the limit"):
        finalize(huge, load_profile("youtube"))
