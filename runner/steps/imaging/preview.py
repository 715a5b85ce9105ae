"""Terminal previews of images: truecolor half-block tiles, or a plain table where colour fails.

Each character cell shows two pixels: ``▀`` with the foreground set to the upper pixel and the
background to the lower one, so a tile N columns wide is N x 2M pixels for M text rows. Tiles sit
side by side with their captions ("#2 ★ ✓") under them.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from PIL import Image

from .finalize import FinalizeError, open_image, to_rgb

UPPER_HALF = "▀"
RESET = "\x1b[0m"
STAR = "★"
TICK = "✓"
CROSS = "✗"
_PLACEHOLDER = (90, 90, 90)  # a tile whose image cannot be read is drawn grey, not dropped


@dataclass(frozen=True)
class Tile:
    """One image to show: encoded bytes or a file path, and the caption under it.

    ``ordinal``, ``picked`` and ``compliant`` are kept for renderers that draw marks as shapes
    (the contact sheet); the text renderers use ``caption``.
    """

    source: bytes | Path
    caption: str
    ordinal: int | None = None
    picked: bool = False
    compliant: bool | None = None

    @classmethod
    def for_iteration(
        cls,
        source: bytes | Path,
        *,
        ordinal: int,
        picked: bool = False,
        compliant: bool | None = None,
    ) -> Tile:
        """A tile captioned the standard way: ``#<ordinal>``, ★ when picked, ✓/✗ compliance."""
        return cls(source, caption_for(ordinal, picked, compliant), ordinal, picked, compliant)


def caption_for(ordinal: int, picked: bool, compliant: bool | None) -> str:
    """``#2 ★ ✓``: the ordinal, a star when picked, a tick or cross for compliance."""
    parts = [f"#{ordinal}"]
    if picked:
        parts.append(STAR)
    if compliant is not None:
        parts.append(TICK if compliant else CROSS)
    return " ".join(parts)


def supports_color(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` can show truecolor tiles.

    No when NO_COLOR is set (non-empty) or TERM is ``dumb``; yes when FORCE_COLOR is set;
    otherwise only a TTY whose COLORTERM says ``truecolor`` or ``24bit``.
    """
    env = os.environ if env is None else env
    if env.get("NO_COLOR"):
        return False
    if env.get("TERM", "").lower() == "dumb":
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    if not callable(isatty) or not isatty():
        return False
    return env.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit")


def render_preview(
    tiles: Sequence[Tile],
    stream: TextIO,
    env: Mapping[str, str] | None = None,
    *,
    width_cols: int | None = None,
) -> str:
    """The grid when ``stream`` supports colour, else the plain table (same captions)."""
    if not supports_color(stream, env):
        return render_table(tiles)
    if width_cols is None:
        width_cols = shutil.get_terminal_size((100, 24)).columns
    return render_grid(tiles, width_cols)


def render_grid(
    tiles: Sequence[Tile],
    width_cols: int = 100,
    *,
    max_tile_cols: int = 36,
    min_tile_cols: int = 12,
    gap: int = 2,
) -> str:
    """Tiles side by side in rows that fit ``width_cols``, captions under each; ANSI truecolor."""
    if not tiles:
        return ""
    per_row, tile_cols = _columns(len(tiles), width_cols, max_tile_cols, min_tile_cols, gap)
    blocks = []
    for start in range(0, len(tiles), per_row):
        row = tiles[start : start + per_row]
        blocks.append(_render_row([_pixels(t, tile_cols) for t in row], row, tile_cols, gap))
    return "\n".join(blocks)


def render_table(tiles: Sequence[Tile]) -> str:
    """A numbered table of captions and paths, for consoles without colour (no escapes)."""
    if not tiles:
        return ""
    width = max(len(t.caption) for t in tiles)
    lines = []
    for i, tile in enumerate(tiles, 1):
        where = (
            str(tile.source)
            if isinstance(tile.source, Path)
            else f"<in memory, {len(tile.source)} bytes>"
        )
        lines.append(f"{i:>3}  {tile.caption:<{width}}  {where}")
    return "\n".join(lines)


def _columns(n: int, width_cols: int, max_cols: int, min_cols: int, gap: int) -> tuple[int, int]:
    # As many tiles per row as fit at min_cols, then as wide as the row allows (up to max_cols).
    per_row = max(1, min(n, (width_cols + gap) // (min_cols + gap)))
    tile_cols = (width_cols - gap * (per_row - 1)) // per_row
    return per_row, max(1, min(max_cols, tile_cols))


def _load(tile: Tile) -> Image.Image | None:
    try:
        raw = tile.source if isinstance(tile.source, bytes) else tile.source.read_bytes()
        return to_rgb(open_image(raw))
    except (OSError, FinalizeError):
        return None


def _pixels(tile: Tile, cols: int) -> Image.Image:
    img = _load(tile)
    aspect = 9 / 16 if img is None else img.height / img.width
    rows = max(2, round(cols * aspect))
    rows += rows % 2  # whole character cells
    if img is None:
        return Image.new("RGB", (cols, rows), _PLACEHOLDER)
    return img.resize((cols, rows), Image.Resampling.BOX, reducing_gap=2.0)


def _render_row(images: list[Image.Image], tiles: Sequence[Tile], cols: int, gap: int) -> str:
    height = max(im.height for im in images)
    spacer = " " * gap
    lines = []
    for y in range(0, height, 2):
        cells = []
        for im in images:
            cells.append(_cells(im, y) if y < im.height else " " * cols)
        lines.append(spacer.join(cells).rstrip())
    lines.append(spacer.join(_fit(t.caption, cols) for t in tiles).rstrip())
    return "\n".join(lines)


def _cells(img: Image.Image, y: int) -> str:
    px = img.load()
    assert px is not None
    out = io.StringIO()
    last: tuple[object, object] | None = None
    for x in range(img.width):
        top, bottom = px[x, y], px[x, y + 1]
        if (top, bottom) != last:  # only emit colours that change: fewer bytes, same picture
            assert isinstance(top, tuple) and isinstance(bottom, tuple)
            out.write(f"\x1b[38;2;{top[0]};{top[1]};{top[2]}m")
            out.write(f"\x1b[48;2;{bottom[0]};{bottom[1]};{bottom[2]}m")
            last = (top, bottom)
        out.write(UPPER_HALF)
    out.write(RESET)
    return out.getvalue()


def _fit(text: str, width: int) -> str:
    if len(text) > width:
        text = text[: max(0, width - 1)] + "…" if width > 1 else text[:width]
    return text.center(width)
