"""Terminal preview: truecolor half-block tiles with captions, and the plain fallback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from runner.steps.imaging.preview import (
    Tile,
    caption_for,
    render_grid,
    render_preview,
    render_table,
    supports_color,
)


class Terminal(io.StringIO):
    """A text stream that says it is a TTY."""

    def isatty(self) -> bool:
        return True


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (160, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def _tiles(tmp_path: Path) -> list[Tile]:
    red = tmp_path / "red.png"
    red.write_bytes(_png((255, 0, 0)))
    return [
        Tile.for_iteration(red, ordinal=1, compliant=True),
        Tile.for_iteration(_png((0, 0, 255)), ordinal=2, picked=True, compliant=True),
        Tile.for_iteration(_png((0, 255, 0), (90, 160)), ordinal=3, compliant=False),
    ]


def test_captions() -> None:
    assert caption_for(2, True, True) == "#2 ★ ✓"
    assert caption_for(3, False, False) == "#3 ✗"
    assert caption_for(1, False, None) == "#1"


def test_grid_draws_half_blocks_in_truecolor_with_captions(tmp_path: Path) -> None:
    text = render_grid(_tiles(tmp_path), 100)
    assert "\x1b[38;2;255;0;0m\x1b[48;2;255;0;0m▀" in text  # the red tile, from its path
    assert "\x1b[38;2;0;0;255m" in text and "\x1b[48;2;0;255;0m" in text
    lines = text.splitlines()
    caption_line = lines[-1]
    assert "\x1b" not in caption_line
    assert caption_line.index("#1 ✓") < caption_line.index("#2 ★ ✓") < caption_line.index("#3 ✗")
    # The portrait tile is taller than the landscape ones: its rows are the grid's height.
    assert len(lines) - 1 > 9
    assert all(line.endswith("\x1b[0m") for line in lines[:-1])


def test_tiles_wrap_into_rows_on_a_narrow_terminal(tmp_path: Path) -> None:
    text = render_grid(_tiles(tmp_path), 30)
    caption_lines = [line for line in text.splitlines() if "#" in line]
    assert len(caption_lines) == 2  # two tiles fit per row at 30 columns, the third wraps


def test_an_unreadable_tile_is_drawn_as_a_placeholder() -> None:
    text = render_grid([Tile.for_iteration(b"broken", ordinal=4, compliant=False)], 40)
    assert "\x1b[38;2;90;90;90m" in text and "#4 ✗" in text


def test_table_fallback_has_no_escapes(tmp_path: Path) -> None:
    tiles = _tiles(tmp_path)
    text = render_table(tiles)
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].split() == ["1", "#1", "✓", str(tmp_path / "red.png")]
    assert lines[1].startswith("  2  #2 ★ ✓") and "<in memory," in lines[1]
    assert lines[2].startswith("  3  #3 ✗")


@pytest.mark.parametrize(
    ("env", "tty", "expected"),
    [
        ({"COLORTERM": "truecolor"}, True, True),
        ({"COLORTERM": "24bit", "TERM": "xterm-256color"}, True, True),
        ({"COLORTERM": "truecolor"}, False, False),
        ({}, True, False),
        ({"COLORTERM": "truecolor", "NO_COLOR": "1"}, True, False),
        ({"COLORTERM": "truecolor", "TERM": "dumb"}, True, False),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
        ({"COLORTERM": "truecolor", "NO_COLOR": ""}, True, True),
    ],
)
def test_supports_color(env: dict[str, str], tty: bool, expected: bool) -> None:
    stream = Terminal() if tty else io.StringIO()
    assert supports_color(stream, env) is expected


def test_render_preview_picks_grid_or_table(tmp_path: Path) -> None:
    tiles = _tiles(tmp_path)
    colour = render_preview(tiles, Terminal(), {"COLORTERM": "truecolor"}, width_cols=90)
    plain = render_preview(tiles, io.StringIO(), {"COLORTERM": "truecolor"}, width_cols=90)
    assert "\x1b[38;2;" in colour
    assert plain == render_table(tiles)
