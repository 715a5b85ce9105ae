"""Text for a terminal: data printed by runner (item ids, params, step ids, model text, a
command's stderr, error messages quoting them) is made inert, so an OSC title change, a cursor
move, a screen clear or a fake line cannot ride in on a value. Kept import-light: every
command's output goes through it.
"""

from __future__ import annotations

import re

# C0 controls (but tab), DEL, C1 controls (ESC's 8-bit forms), and the Unicode line and
# paragraph separators and bidi overrides, which can make a line read as something else.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_NL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\e"}


def _visible(m: re.Match[str]) -> str:
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def safe(value: object, *, lines: bool = False) -> str:
    """``value`` as text a terminal shows as it is: control characters become visible escapes
    (``\\e``, ``\\n``, ``\\x07``). With ``lines`` newlines stay, and each line after the
    first is indented so it cannot pass for a line of runner's own."""
    text = str(value)
    if not lines:
        return _UNSAFE.sub(_visible, text)
    return _UNSAFE_KEEP_NL.sub(_visible, text).replace("\n", "\n  ")


def safe_block(text: str) -> str:
    """A multi-line document runner composed (a run's summary, a graph): its layout stays,
    control characters its data carried become visible."""
    return _UNSAFE_KEEP_NL.sub(_visible, text)
