"""httpx, imported without two optional parts runner never uses.

Importing httpx also imports, whenever they are installed, its command-line client
(``httpx._main``: click, rich's console, progress bars and syntax highlighting, pygments'
lexers), and its first transport imports httpcore, whose trio backend imports trio (and attrs
with it). runner calls httpx from asyncio and never runs httpx's own command line; those two
were ~40% of what an HTTP provider's first call imported (httpx and httpcore: ~150 of ~250 ms
on a loaded machine, 97 of ~330 modules). Both are refused while httpx and httpcore load --
they then fall back exactly as they do when the extra is not installed -- and allowed again
right after, so anything else in the process may still import trio. httpcore is imported here
rather than at the first transport, so that its import is the one made with trio refused.
"""

from __future__ import annotations

import sys

_UNUSED = ("httpx._main", "trio")


def _import_httpx() -> None:
    if "httpx" in sys.modules and "httpcore" in sys.modules:
        return
    refused = [name for name in _UNUSED if name not in sys.modules]
    for name in refused:
        sys.modules[name] = None  # type: ignore[assignment]  # None: "not importable"
    try:
        import httpcore  # noqa: F401
        import httpx  # noqa: F401
    finally:
        for name in refused:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


_import_httpx()

import httpx  # noqa: E402

__all__ = ["httpx"]
