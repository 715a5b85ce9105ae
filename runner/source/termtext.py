"""Text for a terminal: data printed by runner (item ids, params, step ids, model text, file
names, a command's stderr, a provider's error, error messages quoting them) is made inert, so
an OSC title change or clipboard write, a cursor move, a screen clear or a fake line cannot ride
in on a value. No imports beyond ``re``: every layer that composes text for a terminal uses it
(the CLI's printing goes through ``runner.surfaces.cli.termtext``).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

# C0 controls (but tab), DEL, C1 controls (ESC's 8-bit forms), the Unicode line and paragraph
# separators, the bidi overrides, isolates and marks (Trojan Source, CVE-2021-42574) which make
# a line read as something else, and lone surrogates (a file name that is not UTF-8 arrives
# as U+DCxx: a terminal cannot be sent one, and printing it raised UnicodeEncodeError).
_CLASS = "\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = f"[\x00-\x08\x0a{_CLASS}]"
_UNSAFE_KEEP_NL = f"[\x00-\x08{_CLASS}]"
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\e"}

# What JSON may not carry raw to a terminal: json.dumps(ensure_ascii=False) escapes only
# U+0000-U+001F, '"' and '\\'; these become \\uXXXX escapes, the same JSON data.
_JSON_UNSAFE = f"[{_CLASS}]"


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    """Each pattern compiled when first used (~0.2 ms each; a process prints one kind or two)."""
    return re.compile(pattern)


def _visible(m: re.Match[str]) -> str:
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def safe(value: object, *, lines: bool = False) -> str:
    """``value`` as text a terminal shows as it is: control characters become visible escapes
    (``\\e``, ``\\n``, ``\\x07``). With ``lines`` newlines stay, and each line after the
    first is indented so it cannot pass for a line of runner's own."""
    text = str(value)
    if not lines:
        return _compiled(_UNSAFE).sub(_visible, text)
    return _compiled(_UNSAFE_KEEP_NL).sub(_visible, text).replace("\n", "\n  ")


def safe_block(text: str) -> str:
    """A multi-line document runner composed (a run's summary, a graph): its layout stays,
    control characters its data carried become visible."""
    return _compiled(_UNSAFE_KEEP_NL).sub(_visible, text)


def safe_json(text: str) -> str:
    """JSON text (written with ensure_ascii=False) with every character a terminal would act
    on written as a \\uXXXX escape: a reader gets the same data back."""
    unsafe = _compiled(_JSON_UNSAFE)
    if unsafe.search(text) is None:  # (the common case: a search is a third of a sub's cost)
        return text
    return unsafe.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def shown_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` as the user can open it from where they stand: relative to the working
    directory (``../`` included), or absolute when that is shorter."""
    absolute = str(path.resolve()) if path.is_absolute() or path.exists() else str(path)
    try:
        relative = os.path.relpath(absolute, (cwd or Path.cwd()).resolve())
    except (ValueError, OSError):
        return absolute
    return relative if len(relative) <= len(absolute) else absolute
