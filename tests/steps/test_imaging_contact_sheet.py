"""Contact sheet: a PNG grid of tiles with drawn marks, written atomically."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from runner.steps.imaging.contact_sheet import GOLD, GREEN, RED, make_contact_sheet, sheet_layout
from runner.steps.imaging.preview import Tile


def _png(colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (1280, 720), colour).save(buf, "PNG")
    return buf.getvalue()


def _count(img: Image.Image, box: tuple[int, int, int, int], colour: tuple[int, int, int]) -> int:
    region = img.crop(box)
    px = region.load()
    assert px is not None
    return sum(1 for x in range(region.width) for y in range(region.height) if px[x, y] == colour)


def test_sheet_is_a_png_of_the_expected_size_with_marks(tmp_path: Path) -> None:
    tiles = [
        Tile.for_iteration(_png((200, 40, 40)), ordinal=1, compliant=True),
        Tile.for_iteration(_png((40, 200, 40)), ordinal=2, picked=True, compliant=True),
        Tile.for_iteration(_png((40, 40, 200)), ordinal=3, compliant=False),
        Tile.for_iteration(b"not an image", ordinal=4, compliant=False),
        Tile.for_iteration(_png((90, 90, 90)), ordinal=5),
    ]
    dest = tmp_path / "runs" / "r1" / "contact.png"
    assert make_contact_sheet(tiles, dest, tile_width=200, columns=3) == dest
    layout = sheet_layout(5, tile_width=200, aspect=16 / 9, columns=3)
    assert (layout.columns, layout.rows) == (3, 2)
    with Image.open(dest) as sheet:
        assert sheet.format == "PNG"
        assert sheet.size == layout.size
        rgb = sheet.convert("RGB")
    assert [p.name for p in dest.parent.iterdir()] == ["contact.png"]  # no temp file left

    def caption_box(index: int) -> tuple[int, int, int, int]:
        x, y = layout.origin(index)
        top = y + layout.cell_height
        return (x, top, x + layout.cell_width, top + layout.caption_height)

    assert _count(rgb, caption_box(1), GOLD) > 20  # the pick's star
    assert _count(rgb, caption_box(0), GOLD) == 0
    assert _count(rgb, caption_box(0), GREEN) > 10  # tick
    assert _count(rgb, caption_box(2), RED) > 10  # cross
    assert _count(rgb, caption_box(4), GREEN) + _count(rgb, caption_box(4), RED) == 0
    # The image itself sits in its cell.
    x, y = layout.origin(2)
    centre = (x + layout.cell_width // 2, y + layout.cell_height // 2)
    assert rgb.getpixel(centre) == (40, 40, 200)


def test_rewriting_replaces_the_sheet(tmp_path: Path) -> None:
    dest = tmp_path / "sheet.png"
    dest.write_bytes(b"old")
    make_contact_sheet([Tile(_png((1, 2, 3)), "plain caption")], dest, tile_width=100)
    with Image.open(dest) as sheet:
        assert sheet.size == sheet_layout(1, tile_width=100).size


def test_no_tiles_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one tile"):
        make_contact_sheet([], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
