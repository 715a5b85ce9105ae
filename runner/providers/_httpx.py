"""httpx, imported without two optional parts runner never uses.

Importing httpx also imports, whenever they are installed, its command-line client
(``httpx._main``: click, rich's console, progress bars and syntax highlighting, pygments'
lexers) and httpcore's trio backend (trio, and attrs with it). runner calls httpx from asyncio
and never runs httpx's own command line; those two were half of importing httpx (~45 of ~90 ms,
97 of 182 modules) in every apply that calls an HTTP provider. Both are refused while httpx
loads -- httpx and httpcore then fall back exactly as they do when the extra is not installed --
and allowed again right after, so anything else in the process may still import trio.
"""

from __future__ import annotations

import sys

_UNUSED = ("httpx._main", "trio")


def _import_httpx() -> None:
    if "httpx" in sys.modules:
        return
    refused = [name for name in _UNUSED if name not in sys.modules]
    for name in refused:
        sys.modules[name] = None  # type: ignore[assignment]  # None: "not importable"
    try:
        import httpx  # noqa: F401
    finally:
        for name in refused:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


_import_httpx()

import httpx  # noqa: E402

__all__ = ["httpx"]
