"""Is a provider's reply a whole image? Checked cheaply, before the call counts as paid for.

A PNG (what most backends send) is checked without decoding its pixels: every chunk is present
with a matching CRC up to IEND, and the image data inflates to exactly the size its header
promises. That catches a cut-off or garbled reply as surely as a full decode, at a fraction of
the cost. Other formats (and interlaced PNGs, whose data size is not a simple product) get the
full decode of ``open_image``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from .finalize import MAX_PIXELS, FinalizeError, open_image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Samples per pixel of each PNG colour type (grey, RGB, palette, grey+alpha, RGBA).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_INFLATE_STEP = 1 << 20  # bounds the memory one inflate step may take, whatever the ratio


def check_intact(raw: bytes) -> tuple[int, int]:
    """The (width, height) of ``raw`` as shown (EXIF orientation applied). Raise FinalizeError
    unless it is a complete, uncorrupted image of sane size."""
    if raw.startswith(PNG_SIGNATURE):
        header = _png_header(raw)
        if header is not None:
            _check_png(raw, *header)
            return header[1], header[2]
    image = open_image(raw)
    try:
        return image.size
    finally:
        image.close()


def _png_header(raw: bytes) -> tuple[int, int, int] | None:
    """(expected inflated size, width, height) from IHDR, or None when a full decode is due."""
    if len(raw) < 33 or raw[12:16] != b"IHDR":
        raise _corrupt("no IHDR chunk")
    width, height, depth, colour, _method, _filter, interlace = struct.unpack(
        ">IIBBBBB", raw[16:29]
    )
    if interlace or colour not in _CHANNELS:
        return None
    if width < 1 or height < 1:
        raise FinalizeError(f"cannot read image: empty image {width}x{height}")
    if width * height > MAX_PIXELS:
        raise FinalizeError(
            f"image of {width}x{height} pixels is over the limit of {MAX_PIXELS} pixels"
        )
    row = (width * _CHANNELS[colour] * depth + 7) // 8
    return height * (1 + row), width, height  # each row starts with its filter byte


def _check_png(raw: bytes, expected: int, width: int, height: int) -> None:
    inflater = zlib.decompressobj()
    size = 0
    for kind, data in _chunks(raw):
        if kind != b"IDAT":
            continue
        pending: bytes | memoryview = data
        try:
            while pending:
                size += len(inflater.decompress(pending, _INFLATE_STEP))
                if size > expected:
                    raise _corrupt(f"image data larger than {width}x{height} pixels")
                pending = inflater.unconsumed_tail
        except zlib.error as exc:
            raise _corrupt(f"image data: {exc}") from None
    size += len(inflater.flush())
    if not inflater.eof or size != expected:
        raise _corrupt(f"image data ends after {size} of {expected} bytes")


def _chunks(raw: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """(type, data) of every chunk up to IEND, CRCs checked; raises when the file stops short."""
    view = memoryview(raw)
    pos = len(PNG_SIGNATURE)
    while True:
        if pos + 12 > len(raw):
            raise _corrupt("file ends before IEND")
        length, kind = struct.unpack(">I4s", raw[pos : pos + 8])
        end = pos + 8 + length
        if end + 4 > len(raw):
            raise _corrupt(f"{kind!r} chunk cut off")
        (crc,) = struct.unpack(">I", raw[end : end + 4])
        if zlib.crc32(view[pos + 4 : end]) != crc:
            raise _corrupt(f"CRC mismatch in {kind!r} chunk")
        if kind == b"IEND":
            return
        yield kind, view[pos + 8 : end]
        pos = end + 4


def _corrupt(detail: str) -> FinalizeError:
    # Worded as open_image words it, so callers and users see one message for one fault.
    return FinalizeError(f"cannot read image: corrupt or truncated data ({detail})")


__all__ = ["check_intact"]
