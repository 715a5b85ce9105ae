"""What a warm server imported, and whether a fresh interpreter would now import the same.

A command's child uses the server's modules; a fresh process would read them from disk now. They
differ when an imported module's file changed (an edit, an upgrade) or when a file appeared in a
directory of the import path that would now be found first for a name already imported (a
``yaml.py`` in the directory `python -m runner` puts first, a new ``.pth`` in site-packages).
A directory's other changes (an apply writing its outputs beside a launcher) change nothing.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

_SOURCES = (".py", ".pyc", *EXTENSION_SUFFIXES)


def _signature(path: str) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class Imported:
    """A snapshot taken after the server's imports."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[int, int, int]] = {}
        self.origin: dict[str, str] = {}  # top-level name -> the import path directory it came from
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if not file:
                continue  # built in, frozen, or a namespace package
            self.files[file] = _signature(file)
            if "." not in name:
                folder = os.path.dirname(file)
                if os.path.basename(file).startswith("__init__."):
                    folder = os.path.dirname(folder)
                self.origin[name] = folder
        self.folders = {p: _signature(p) for p in sys.path if p and os.path.isdir(p)}
        self.pth = {p: self._pth(p) for p in self.folders}

    @staticmethod
    def _pth(folder: str) -> frozenset[tuple[str, tuple[int, int, int]]]:
        try:
            names = os.listdir(folder)
        except OSError:
            return frozenset()
        return frozenset(
            (n, _signature(os.path.join(folder, n))) for n in names if n.endswith(".pth")
        )

    @staticmethod
    def _shadows(folder: str, entry: str, origin: str) -> bool:
        """Whether ``entry`` in ``folder`` would be imported before the module from ``origin``."""
        if folder == origin:
            return False  # the module's own file is compared by its signature
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            # a package only with its __init__: a plain folder named like a module (a project's
            # `http/`) is at most a namespace portion, which any module found later wins over
            return any(os.path.exists(os.path.join(path, "__init__" + s)) for s in _SOURCES)
        if not entry.endswith(_SOURCES):
            return False  # a script named like a module (venv/bin/httpx) is not importable
        if origin not in sys.path:
            return True  # found by a finder of its own (editable): anything may come first
        return sys.path.index(folder) < sys.path.index(origin)

    def changed(self) -> str | None:
        """What a fresh process would now import differently, or None."""
        for file, signature in self.files.items():
            if _signature(file) != signature:
                return file
        for folder, signature in self.folders.items():
            now = _signature(folder)
            if now == signature:
                continue
            try:
                names = os.listdir(folder)
            except OSError:
                return folder
            for entry in names:
                stem = entry.split(".", 1)[0]
                if stem in self.origin and self._shadows(folder, entry, self.origin[stem]):
                    return os.path.join(folder, entry)
            if self._pth(folder) != self.pth[folder]:
                return folder  # site's .pth files (start-up, once)
            self.folders[folder] = now  # looked at: nothing imported is shadowed
        return None
