"""A contact sheet: every tile of a run on one PNG, captioned, written atomically.

Marks are drawn as shapes (a star polygon, a tick, a cross) rather than glyphs, because Pillow's
built-in font has no ★ ✓ ✗ and a missing glyph would print as a box.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .finalize import FinalizeError, open_image, to_rgb
from .preview import Tile

BACKGROUND = (24, 24, 24)
TEXT = (235, 235, 235)
GOLD = (245, 190, 40)
GREEN = (60, 190, 90)
RED = (225, 60, 60)
PLACEHOLDER = (70, 70, 70)


@dataclass(frozen=True)
class SheetLayout:
    """The geometry of a sheet, so callers (and tests) know its size before drawing it."""

    columns: int
    rows: int
    cell_width: int
    cell_height: int
    caption_height: int
    padding: int

    @property
    def size(self) -> tuple[int, int]:
        width = self.columns * self.cell_width + (self.columns + 1) * self.padding
        row_height = self.cell_height + self.caption_height
        height = self.rows * row_height + (self.rows + 1) * self.padding
        return width, height

    def origin(self, index: int) -> tuple[int, int]:
        col, row = index % self.columns, index // self.columns
        x = self.padding + col * (self.cell_width + self.padding)
        y = self.padding + row * (self.cell_height + self.caption_height + self.padding)
        return x, y


def sheet_layout(
    count: int, *, tile_width: int = 320, aspect: float = 16 / 9, columns: int | None = None
) -> SheetLayout:
    """Layout for ``count`` tiles ``tile_width`` wide at ``aspect`` (width / height)."""
    if count < 1:
        raise ValueError("a contact sheet needs at least one tile")
    cols = max(1, min(count, columns if columns is not None else 4))
    return SheetLayout(
        columns=cols,
        rows=math.ceil(count / cols),
        cell_width=tile_width,
        cell_height=max(1, round(tile_width / aspect)),
        caption_height=max(20, tile_width // 8),
        padding=max(4, tile_width // 24),
    )


def make_contact_sheet(
    tiles: Sequence[Tile],
    dest_path: Path,
    *,
    tile_width: int = 320,
    columns: int | None = None,
) -> Path:
    """Write a PNG grid of ``tiles`` with captions to ``dest_path`` (temp file, then rename).

    Each image is fitted into its cell without cropping; an unreadable one is drawn as a grey
    cell so the sheet still shows every tile. The cell aspect is the first readable image's.
    Raises ValueError for no tiles and OSError when ``dest_path`` cannot be written.
    """
    images = [_load(t) for t in tiles]
    first = next((im for im in images if im is not None), None)
    aspect = first.width / first.height if first is not None else 16 / 9
    layout = sheet_layout(len(tiles), tile_width=tile_width, aspect=aspect, columns=columns)
    sheet = Image.new("RGB", layout.size, BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=max(10, round(layout.caption_height * 0.6)))
    for index, (tile, img) in enumerate(zip(tiles, images, strict=True)):
        x, y = layout.origin(index)
        _paste_fitted(sheet, img, (x, y), layout.cell_width, layout.cell_height)
        _caption(draw, tile, font, (x, y + layout.cell_height), layout)
    dest_path = Path(dest_path)
    _write_atomically(sheet, dest_path)
    return dest_path


def _load(tile: Tile) -> Image.Image | None:
    try:
        raw = tile.source if isinstance(tile.source, bytes) else tile.source.read_bytes()
        return to_rgb(open_image(raw))
    except (OSError, FinalizeError):
        return None


def _paste_fitted(
    sheet: Image.Image, img: Image.Image | None, at: tuple[int, int], width: int, height: int
) -> None:
    x, y = at
    if img is None:
        sheet.paste(PLACEHOLDER, (x, y, x + width, y + height))
        return
    scale = min(width / img.width, height / img.height)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    fitted = img.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    sheet.paste(fitted, (x + (width - size[0]) // 2, y + (height - size[1]) // 2))


def _caption(
    draw: ImageDraw.ImageDraw,
    tile: Tile,
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont,
    at: tuple[int, int],
    layout: SheetLayout,
) -> None:
    x, y = at
    mid = y + layout.caption_height / 2
    if tile.ordinal is None:  # no structured marks: the caption text is all there is
        draw.text((x + 2, mid), tile.caption, font=font, fill=TEXT, anchor="lm")
        return
    label = f"#{tile.ordinal}"
    draw.text((x + 2, mid), label, font=font, fill=TEXT, anchor="lm")
    cursor = x + 2 + draw.textlength(label, font=font) + layout.caption_height * 0.4
    mark = layout.caption_height * 0.6  # the size of one mark's square
    if tile.picked:
        _star(draw, (cursor + mark / 2, mid), mark / 2)
        cursor += mark * 1.4
    if tile.compliant is True:
        _tick(draw, (cursor, mid - mark / 2), mark)
    elif tile.compliant is False:
        _cross(draw, (cursor, mid - mark / 2), mark)


def _star(draw: ImageDraw.ImageDraw, centre: tuple[float, float], radius: float) -> None:
    cx, cy = centre
    points = []
    for k in range(10):
        r = radius if k % 2 == 0 else radius * 0.42
        angle = -math.pi / 2 + k * math.pi / 5
        points.append((cx + r * math.cos(angle), cy + r * math.sin(angle)))
    draw.polygon(points, fill=GOLD)


def _tick(draw: ImageDraw.ImageDraw, top_left: tuple[float, float], size: float) -> None:
    x, y = top_left
    width = max(2, round(size / 6))
    points = [(x, y + size * 0.55), (x + size * 0.38, y + size * 0.9), (x + size, y + size * 0.1)]
    draw.line(points, fill=GREEN, width=width, joint="curve")


def _cross(draw: ImageDraw.ImageDraw, top_left: tuple[float, float], size: float) -> None:
    x, y = top_left
    width = max(2, round(size / 6))
    draw.line([(x, y), (x + size, y + size)], fill=RED, width=width)
    draw.line([(x, y + size), (x + size, y)], fill=RED, width=width)


def _write_atomically(sheet: Image.Image, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    renamed = False
    try:
        with os.fdopen(fd, "wb") as out:
            sheet.save(out, "PNG", optimize=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
        renamed = True
    finally:
        if not renamed:  # never leave a half-written temp file behind
            Path(tmp).unlink(missing_ok=True)
