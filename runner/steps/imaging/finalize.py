"""Turn a provider's raw image into a final that fits a compliance profile.

open (strictly: a truncated file is an error, not a grey half-image) -> EXIF orientation ->
any mode to RGB -> cover resize and centre crop to the target -> optional title overlay ->
encode under the profile's byte limit -> measure and check the encoded bytes.

Everything here is synchronous, CPU-bound Pillow work; callers run it in a worker thread.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Literal

from PIL import Image, ImageDraw, ImageFilter, ImageFont, ImageOps, UnidentifiedImageError

from .compliance import Report, check_bytes
from .profiles import Profile

Format = Literal["jpeg", "png"]

BACKGROUND = (255, 255, 255)  # what transparent pixels are flattened onto
JPEG_MAX_QUALITY = 92
JPEG_MIN_QUALITY = 30
MAX_PIXELS = 64_000_000  # 8000x8000; far above any generated image, far below a bomb
_EXT = {"jpeg": "jpg", "png": "png"}
_ORIENTATION_TAG = 0x0112
_SWAPPING_ORIENTATIONS = {5, 6, 7, 8}  # rotated a quarter turn: width and height trade places


class FinalizeError(ValueError):
    """The raw image cannot be finalised (corrupt, truncated, not an image, too large)."""


@dataclass(frozen=True)
class Finalized:
    """An encoded final and its compliance report."""

    data: bytes
    ext: str  # file extension without the dot: jpg, png
    width: int
    height: int
    format: Format
    bytes_len: int
    report: Report
    quality: int | None = None  # the JPEG quality chosen, None for PNG
    notes: tuple[str, ...] = field(default_factory=tuple)  # e.g. a PNG -> JPEG fallback

    @property
    def compliant(self) -> bool:
        return self.report.compliant


def finalize(
    raw: bytes,
    profile: Profile,
    *,
    title: str | None = None,
    fmt: Format | None = None,
) -> Finalized:
    """Finalise ``raw`` (any format Pillow reads) for ``profile``.

    ``fmt`` defaults to JPEG when the profile allows jpg, else PNG. A PNG over the byte limit
    falls back to JPEG when the profile allows jpg. The result is always the exact target size;
    whether it complies (e.g. a JPEG that cannot get under the limit even at the lowest quality)
    is in ``report``. Raises FinalizeError for bytes that are not a complete, readable image.
    """
    if fmt is None:
        fmt = "jpeg" if profile.allows("jpg") or not profile.allows("png") else "png"
    if fmt not in _EXT:
        raise FinalizeError(f"unsupported output format '{fmt}' (use jpeg or png)")
    img = open_image(raw, draft_size=(profile.width, profile.height))
    img = to_rgb(img)
    img = cover(img, profile.width, profile.height)
    if title and title.strip():
        img = draw_title(img, title)
    data, used, quality, notes = _encode(img, profile, fmt)
    report = check_bytes(data, profile)
    return Finalized(
        data=data,
        ext=_EXT[used],
        width=img.width,
        height=img.height,
        format=used,
        bytes_len=len(data),
        report=report,
        quality=quality,
        notes=notes,
    )


# -- reading -------------------------------------------------------------------------------------


def open_image(raw: bytes, *, draft_size: tuple[int, int] | None = None) -> Image.Image:
    """Decode ``raw`` fully and apply its EXIF orientation.

    ``draft_size`` lets a JPEG decode at a reduced scale that still covers that size, which
    makes a 6000x4000 photo cheap. Raises FinalizeError on anything unreadable, and on images
    over MAX_PIXELS (checked before decoding).
    """
    if not raw:
        raise FinalizeError("cannot read image: no bytes")
    try:
        opened = Image.open(io.BytesIO(raw))
        # Checked from the header, before decoding: a bomb never gets to allocate. The limit is
        # below Pillow's own warning threshold, so its (global, thread-unsafe) warning never fires.
        pixels = opened.width * opened.height
        if pixels > MAX_PIXELS:
            raise FinalizeError(
                f"image of {opened.width}x{opened.height} pixels is over the limit of "
                f"{MAX_PIXELS} pixels"
            )
        orientation = _orientation(opened)
        if draft_size is not None and opened.format == "JPEG":
            w, h = draft_size
            opened.draft(None, (h, w) if orientation in _SWAPPING_ORIENTATIONS else (w, h))
        # Image.open is lazy: only load() decodes, and only then does truncation show.
        opened.load()
        img: Image.Image = opened
        if orientation not in (None, 1):
            img = ImageOps.exif_transpose(opened)
    except FinalizeError:
        raise
    except Image.DecompressionBombError as exc:
        raise FinalizeError(f"image too large to decode safely: {exc}") from None
    except UnidentifiedImageError:
        raise FinalizeError(
            f"cannot read image: not a recognised image format ({len(raw)} bytes)"
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise FinalizeError(f"cannot read image: corrupt or truncated data ({exc})") from None
    if img.width < 1 or img.height < 1:
        raise FinalizeError(f"cannot read image: empty image {img.width}x{img.height}")
    return img


def _orientation(img: Image.Image) -> int | None:
    try:
        value = img.getexif().get(_ORIENTATION_TAG)
    except Exception:  # a malformed EXIF block must not make a readable image unreadable
        return None
    return value if isinstance(value, int) else None


def to_rgb(img: Image.Image, background: tuple[int, int, int] = BACKGROUND) -> Image.Image:
    """Any Pillow mode to 8-bit RGB; transparency is flattened onto ``background``."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode.startswith("I;16") or mode in ("I", "F"):
        return _deep_to_rgb(img)
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        mode in ("P", "L", "RGB", "1") and "transparency" in img.info
    )
    try:
        if has_alpha:
            rgba = img.convert("RGBA")
            flat = Image.new("RGBA", rgba.size, (*background, 255))
            flat.alpha_composite(rgba)
            return flat.convert("RGB")
        return img.convert("RGB")
    except ValueError as exc:  # a mode Pillow cannot convert (e.g. LAB without a profile)
        raise FinalizeError(f"cannot convert image mode {mode} to RGB: {exc}") from None


def _deep_to_rgb(img: Image.Image) -> Image.Image:
    # 16-bit and float greys: convert("L") clips at 255, which turns most 16-bit images white.
    # Scale the used range linearly onto 0..255 instead.
    wide = img.convert("F")
    low, high = wide.getextrema()
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
        raise FinalizeError(f"cannot read image: unexpected extrema for mode {img.mode}")
    if img.mode.startswith("I;16"):
        low, high = 0.0, 65535.0  # the format's own range keeps dark images dark
    span = float(high) - float(low) or 1.0
    scaled = wide.point(lambda v: (v - low) * (255.0 / span))
    return scaled.convert("L").convert("RGB")


# -- geometry ------------------------------------------------------------------------------------


def cover(img: Image.Image, width: int, height: int) -> Image.Image:
    """Scale ``img`` to cover ``width`` x ``height`` and crop the centre (no bars, no stretch)."""
    src_w, src_h = img.size
    if (src_w, src_h) == (width, height):
        return img
    scale = max(width / src_w, height / src_h)
    crop_w, crop_h = width / scale, height / scale
    left, top = (src_w - crop_w) / 2, (src_h - crop_h) / 2
    box = (left, top, left + crop_w, top + crop_h)
    # reducing_gap makes huge downscales fast (a box reduction first) at no visible cost.
    return img.resize((width, height), Image.Resampling.LANCZOS, box=box, reducing_gap=3.0)


# -- title overlay -------------------------------------------------------------------------------


def _font(size: int) -> ImageFont.FreeTypeFont:
    font = ImageFont.load_default(size=size)
    if not isinstance(font, ImageFont.FreeTypeFont):
        raise FinalizeError("the title overlay needs Pillow built with FreeType")
    return font


def wrap(text: str, font: ImageFont.FreeTypeFont, max_width: float) -> list[str]:
    """Greedy word wrap to ``max_width`` pixels; a word longer than a line is broken."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if font.getlength(candidate) <= max_width:
            current = candidate
            continue
        if current:
            lines.append(current)
        current = ""
        while font.getlength(word) > max_width and len(word) > 1:
            cut = len(word) - 1
            while cut > 1 and font.getlength(word[:cut]) > max_width:
                cut -= 1
            lines.append(word[:cut])
            word = word[cut:]
        current = word
    if current:
        lines.append(current)
    return lines


@dataclass(frozen=True)
class _Layout:
    size: int
    lines: list[str]
    line_height: int
    spacing: int
    stroke: int

    @property
    def height(self) -> int:
        n = len(self.lines)
        return n * self.line_height + (n - 1) * self.spacing + 2 * self.stroke


def _layout(text: str, size: int, box_w: int) -> _Layout:
    font = _font(size)
    stroke = max(1, round(size / 14))
    ascent, descent = font.getmetrics()
    return _Layout(
        size=size,
        lines=wrap(text, font, box_w - 2 * stroke),
        line_height=ascent + descent,
        spacing=round(size * 0.12),
        stroke=stroke,
    )


def fit_title(text: str, box_w: int, box_h: int, *, min_size: int, max_size: int) -> _Layout:
    """The largest font size whose wrapped lines fit the box (binary search over sizes).

    When even ``min_size`` does not fit, the lines that fit are kept and the last one ends
    with "...".
    """
    text = " ".join(text.split())
    lo, hi = min_size, max(min_size, max_size)
    best: _Layout | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        layout = _layout(text, mid, box_w)
        if layout.height <= box_h:
            best, lo = layout, mid + 1
        else:
            hi = mid - 1
    if best is not None:
        return best
    layout = _layout(text, min_size, box_w)
    keep = max(
        1, (box_h - 2 * layout.stroke + layout.spacing) // (layout.line_height + layout.spacing)
    )
    lines = layout.lines[:keep]
    font = _font(min_size)
    last = lines[-1]
    while last and font.getlength(last + "...") > box_w - 2 * layout.stroke:
        last = last[:-1]
    lines[-1] = last.rstrip() + "..."
    return _Layout(min_size, lines, layout.line_height, layout.spacing, layout.stroke)


def draw_title(img: Image.Image, title: str) -> Image.Image:
    """Draw ``title`` across the bottom third: wrapped, sized to fit, outlined, shadowed.

    A soft dark band behind the text keeps it readable on light images.
    """
    w, h = img.size
    margin = max(2, round(min(w, h) * 0.04))
    box_w = max(8, w - 2 * margin)
    box_h = max(8, h // 3 - margin)
    layout = fit_title(title, box_w, box_h, min_size=max(8, h // 45), max_size=max(8, h // 7))
    top = h - margin - layout.height
    out = img.convert("RGB").copy()

    band_top = max(0, top - margin)
    band = Image.linear_gradient("L").resize((w, h - band_top))
    out.paste((0, 0, 0), (0, band_top), band.point(lambda v: int(v * 0.55)))

    # Shadow: the same text, blurred, drawn dark and offset down-right under the real text.
    # Only the band is blurred: the rest of the image never has text in it.
    shadow = Image.new("L", (w, h - band_top), 0)
    _draw_lines(ImageDraw.Draw(shadow), layout, w, top - band_top, fill=200, stroke_fill=200)
    offset = max(1, layout.size // 18)
    shadow = shadow.filter(ImageFilter.GaussianBlur(max(1, layout.size // 16)))
    visible = shadow.crop((0, 0, w - offset, shadow.height - offset))
    out.paste((0, 0, 0), (offset, band_top + offset), visible)

    _draw_lines(ImageDraw.Draw(out), layout, w, top, fill=(255, 255, 255), stroke_fill=(0, 0, 0))
    return out


def _draw_lines(
    draw: ImageDraw.ImageDraw,
    layout: _Layout,
    width: int,
    top: int,
    *,
    fill: int | tuple[int, int, int],
    stroke_fill: int | tuple[int, int, int],
) -> None:
    font = _font(layout.size)
    y = top + layout.stroke
    for line in layout.lines:
        draw.text(
            (width / 2, y),
            line,
            font=font,
            fill=fill,
            anchor="ma",
            stroke_width=layout.stroke,
            stroke_fill=stroke_fill,
        )
        y += layout.line_height + layout.spacing


# -- encoding ------------------------------------------------------------------------------------


def _encode(
    img: Image.Image, profile: Profile, fmt: Format
) -> tuple[bytes, Format, int | None, tuple[str, ...]]:
    limit = profile.max_bytes  # files must be strictly smaller
    notes: tuple[str, ...] = ()
    if fmt == "png":
        data = _png(img)
        if len(data) < limit or not profile.allows("jpg"):
            return data, "png", None, notes
        notes = (f"png of {len(data)} bytes is over the limit {limit}; encoded as jpeg",)
    data, quality = _jpeg_under(img, limit)
    return data, "jpeg", quality, notes


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def _jpeg(img: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def _jpeg_under(img: Image.Image, limit: int) -> tuple[bytes, int]:
    """The highest quality in [JPEG_MIN_QUALITY, JPEG_MAX_QUALITY] that is under ``limit``.

    Size grows with quality, so a binary search needs about six encodes in the worst case. When
    even the lowest quality is too big, that encoding is returned and compliance reports it.
    """
    data = _jpeg(img, JPEG_MAX_QUALITY)
    if len(data) < limit:
        return data, JPEG_MAX_QUALITY
    lo, hi = JPEG_MIN_QUALITY, JPEG_MAX_QUALITY - 1
    best: tuple[bytes, int] | None = None
    smallest: tuple[bytes, int] = (data, JPEG_MAX_QUALITY)
    while lo <= hi:
        mid = (lo + hi) // 2
        data = _jpeg(img, mid)
        if len(data) < len(smallest[0]):
            smallest = (data, mid)
        if len(data) < limit:
            best, lo = (data, mid), mid + 1
        else:
            hi = mid - 1
    return best if best is not None else smallest
