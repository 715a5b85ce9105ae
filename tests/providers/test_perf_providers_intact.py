"""The cheap integrity check of provider replies (check_intact) against the full decode."""

from __future__ import annotations

import io
import random
import struct
import zlib

import pytest
from PIL import Image

from runner.providers.fake import draw_image
from runner.steps.imaging.finalize import MAX_PIXELS, FinalizeError, open_image
from runner.steps.imaging.intact import PNG_SIGNATURE, check_intact


def _png(img: Image.Image, **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG", **options)
    return out.getvalue()


def _samples() -> list[bytes]:
    base = Image.new("RGB", (37, 19), (10, 200, 30))
    images = [base.convert(mode) for mode in ("1", "L", "P", "RGB", "RGBA", "LA")]
    images.append(Image.new("I;16", (37, 19), 300))
    pngs = [_png(img, **opts) for img in images for opts in ({}, {"interlace": 1})]
    jpeg = io.BytesIO()
    base.save(jpeg, "JPEG")
    return [draw_image("a lighthouse", 3, (64, 48), []), *pngs, jpeg.getvalue()]


def _decodes(raw: bytes) -> bool:
    try:
        open_image(raw).close()
    except FinalizeError:
        return False
    return True


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@pytest.mark.parametrize("raw", _samples(), ids=lambda raw: str(len(raw)))
def test_whole_images_pass_and_every_cut_is_refused(raw: bytes) -> None:
    check_intact(raw)
    for cut in range(0, len(raw), max(1, len(raw) // 60)):
        with pytest.raises(FinalizeError, match=r"truncated|not a recognised|no bytes"):
            check_intact(raw[:cut])


def test_never_accepts_a_garbled_image_the_full_decode_refuses() -> None:
    rng = random.Random(7)
    for raw in _samples():
        for _ in range(60):
            garbled = bytearray(raw)
            garbled[rng.randrange(8, len(raw))] ^= 1 << rng.randrange(8)
            accepted = True
            try:
                check_intact(bytes(garbled))
            except FinalizeError:
                accepted = False
            assert not accepted or _decodes(bytes(garbled))


def test_a_flipped_bit_in_the_pixel_data_is_a_crc_mismatch() -> None:
    raw = bytearray(draw_image("p", 1, (32, 32), []))
    idat = raw.index(b"IDAT")
    raw[idat + 10] ^= 0x40
    with pytest.raises(FinalizeError, match="CRC mismatch"):
        check_intact(bytes(raw))


def test_pixel_data_must_inflate_to_the_size_the_header_promises() -> None:
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 0, 0, 0, 0))  # 4x4 grey
    short = zlib.compress(b"\x00" * 5 * 3)  # three rows of the four
    raw = PNG_SIGNATURE + header + _chunk(b"IDAT", short) + _chunk(b"IEND", b"")
    with pytest.raises(FinalizeError, match="ends after 15 of 20 bytes"):
        check_intact(raw)
    whole = zlib.compress(b"\x00" * 5 * 4)
    check_intact(PNG_SIGNATURE + header + _chunk(b"IDAT", whole) + _chunk(b"IEND", b""))


def test_an_oversized_header_is_refused_before_inflating() -> None:
    side = int(MAX_PIXELS**0.5) + 1
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    raw = PNG_SIGNATURE + header + _chunk(b"IEND", b"")
    with pytest.raises(FinalizeError, match="over the limit"):
        check_intact(raw)


def test_not_an_image_is_refused_as_the_full_decode_does() -> None:
    with pytest.raises(FinalizeError, match="not a recognised image format"):
        check_intact(b"<html>rate limited</html>")
