"""Paths named by pipelines or users never escape their root."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from ..errors import InvalidPipeline, Location

_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def inside(root: Path, rel: str | os.PathLike[str], *, where: Location | None = None) -> Path:
    """Resolve ``rel`` against ``root`` and refuse it when it ends up outside ``root``.

    Absolute paths, ``..`` walks and symlinks that point out are all refused (symlinks are
    resolved before the check). Raises InvalidPipeline.
    """
    text = os.fspath(rel)
    known = _known.get((root, text))
    if known is not None:
        return known
    target = Path(inside_text(root, text, where=where))
    if len(_known) < 65536 and os.path.isabs(root):  # a relative root depends on the cwd
        _known[(root, text)] = target
    return target


def inside_text(root: Path, rel: str, *, where: Location | None = None) -> str:
    """``inside`` as text, not remembered: for a check of many paths once (no Path built).
    As check_inside, a directory many of them name is listed once, not an lstat each."""
    if os.path.isabs(root) and rel.isascii() and _SIMPLE.fullmatch(rel):
        below = _below(_real_dir(_absolute(root)), rel)
        if below is not None:
            return below
    return _checked(root, rel, where)  # (raises for one that escapes, saying why)


class InsideRoot:
    """``inside_text`` for many paths below one root (a check of every step's outputs): the
    root's own tests and real path are taken once, not for each path (~1 us of ~5 each)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._base = _real_dir(_absolute(root)) if os.path.isabs(root) else None

    def text(self, rel: str, *, where: Location | None = None) -> str:
        """``inside_text(root, rel, where=where)``."""
        if self._base is not None and rel.isascii() and _SIMPLE.fullmatch(rel):
            below = _below(self._base, rel)
            if below is not None:
                return below
        return _checked(self.root, rel, where)


def check_inside(root: Path, rel: str, *, where: Location | None = None) -> None:
    """``inside`` for a check only (validating a step): the same refusals, no Path built. A
    pair that passed is not checked again until ``forget`` (a chain names each file twice: as
    one step's output and the next one's input)."""
    global _passed_root, _passed_here, _base_here
    if root is not _passed_root:  # one root for every step of a pipeline: one lookup
        _passed_root, _passed_here = root, _passed.setdefault(root, set())
        _base_here = _real_dir(_absolute(root)) if os.path.isabs(root) else None
    if rel in _passed_here:
        return
    if (root, rel) not in _known:
        simple = _SIMPLE.fullmatch(rel) if rel.isascii() else None
        if simple is None or _base_here is None:
            _checked(root, rel, where)
        elif _below(_base_here, rel) is None:
            _checked(root, rel, where)  # it escapes: the full check words the error
    _passed_here.add(rel)


# A relative path of plain names: no empty, "." or ".." part, no NUL, ASCII (so no undecodable
# byte). Its real path is its directory's (cached) plus its leaf, unless the leaf is a symlink.
_SIMPLE = re.compile(r"(?!\.\.?(?:/|$))[^/\x00]+(?:/(?!\.\.?(?:/|$))[^/\x00]+)*")


def plain_relative(rel: str) -> bool:
    """Whether ``rel`` is a relative path of plain names (no empty, "." or ".." part, no NUL),
    in ASCII: below a root whenever none of its parts is a symlink."""
    return rel.isascii() and _SIMPLE.fullmatch(rel) is not None


def _below(base: str, rel: str) -> str | None:
    """``_resolved(base, rel)`` for a real directory ``base`` and a ``_SIMPLE`` ``rel``."""
    head, _, leaf = rel.rpartition("/")
    directory = _real_dir(f"{base}/{head}" if head else base)
    target = f"{directory}/{leaf}" if directory != "/" else f"/{leaf}"
    if _is_link(directory, leaf):
        target = os.path.realpath(target)
    if target != base and not target.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return target


_LIST_AFTER = 16  # paths asked for in one directory before its listing answers for it


def _is_link(directory: str, leaf: str) -> bool:
    """Whether ``directory/leaf`` is a symlink: an lstat, or for a directory many paths name
    (a chain's every output) one listing of its symlinks, taken once until ``forget``."""
    if directory in _links:
        links = _links[directory]
    else:
        asked = _asked[directory] = _asked.get(directory, 0) + 1
        if asked < _LIST_AFTER:
            return os.path.islink(f"{directory}/{leaf}")
        links = _links[directory] = _symlinks_in(directory)
    if links is None:  # not listable (no read permission): each name its own lstat
        return os.path.islink(f"{directory}/{leaf}")
    return leaf in links


def _symlinks_in(directory: str) -> frozenset[str] | None:
    try:
        with os.scandir(directory) as entries:
            return frozenset(e.name for e in entries if e.is_symlink())
    except FileNotFoundError:
        return frozenset()  # nothing in it exists yet, so nothing is a symlink
    except OSError:
        return None


def _checked(root: Path, text: str, where: Location | None) -> str:
    if not text:
        raise InvalidPipeline("empty path", where=where)
    if "\x00" in text:
        raise InvalidPipeline(f"path {text!r} contains a NUL byte", where=where)
    bad = _NOT_UTF8.search(text)
    if bad is not None:  # a name whose bytes are not UTF-8 (Python hands it over as U+DCxx)
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise InvalidPipeline(
            f"path '{shown}' is not UTF-8 (byte 0x{ord(bad.group()) - 0xDC00:02x}); runner "
            "records paths as text",
            where=where,
            hint="rename the file (e.g. convmv -f latin1 -t utf8)",
        )
    if os.path.isabs(text):
        raise InvalidPipeline(
            f"path '{text}' is absolute; pipeline paths are relative to {root}", where=where
        )
    # absolute: the key must not depend on cwd
    target = _resolved(_absolute(root) if os.path.isabs(root) else os.path.abspath(root), text)
    if target is None:
        raise InvalidPipeline(
            f"path '{text}' escapes the pipeline root {os.path.realpath(root)}",
            where=where,
            hint="declare a wider `root:` in the pipeline if this is intended",
        )
    return target


# (root as given, path as given) -> resolved: the same pair is asked for at compile time and
# again for every execution of the step, and abspath/realpath walks are the costly part.
_known: dict[tuple[Path, str], Path] = {}
_passed: dict[Path, set[str]] = {}  # root -> the paths check_inside found inside it
_passed_root: Path | None = None  # the last root asked for, and its set
_passed_here: set[str] = set()
_base_here: str | None = None  # its real path (None: a relative root, resolved per path)
_links: dict[str, frozenset[str] | None] = {}  # directory -> its symlinks' names (None: unlisted)
_asked: dict[str, int] = {}  # directory -> paths asked for in it before it was listed


def forget() -> None:
    """Drop every remembered resolution: a directory may have become a symlink since. Called as
    a compile begins (every apply compiles first), so a long-lived process (watch, serve) never
    trusts a resolution older than the command it serves."""
    global _passed_root
    _known.clear()
    _passed.clear()
    _passed_root = None
    _links.clear()
    _asked.clear()
    _resolved.cache_clear()
    _real_dir.cache_clear()
    _absolute.cache_clear()


@lru_cache(maxsize=65536)
def _resolved(root: str, rel: str) -> str | None:
    """The real path of ``rel`` under ``root``, or None when it lies outside.

    Resolving walks every component with lstat: cached until ``forget`` (the plan's root is
    absolute, so the key does not depend on the working directory).
    """
    base = _real_dir(root)
    target = real_file(os.path.join(base, rel), _real_dir)
    if target != base and not target.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return target


def real_file(path: str, real_dir: Callable[[str], str] = os.path.realpath) -> str:
    """``os.path.realpath(path)``, its directory resolved by ``real_dir`` (a cache of
    realpath): realpath(head/leaf) == realpath(realpath(head)/leaf) for a plain leaf name, so
    the directory's walk is shared by every file in it and the leaf costs one lstat."""
    head, leaf = os.path.split(path)
    if leaf in ("", ".", ".."):
        return os.path.realpath(path)
    target = os.path.join(real_dir(head), leaf)
    return os.path.realpath(target) if os.path.islink(target) else target


@lru_cache(maxsize=256)
def _absolute(root: Path) -> str:
    """``root`` (absolute) normalised: asked for every path of every step, with one root."""
    return os.path.abspath(root)


@lru_cache(maxsize=4096)
def _real_dir(path: str) -> str:
    return os.path.realpath(path)


def inside_now(root: Path, rel: str, *, real_root: str | None = None) -> Path | None:
    """``rel``'s real path under ``root`` as the disk is now (no remembered resolution), or None
    when it lies outside: for writing or reading a file after earlier steps of the same run may
    have replaced a directory on its path with a symlink pointing out. ``real_root`` is
    ``os.path.realpath(root)`` when the caller already has it (one walk for several paths)."""
    base = os.path.realpath(root) if real_root is None else real_root
    target = real_below(base, rel)
    if target != base and not target.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return Path(target)


def real_below(base: str, rel: str) -> str:
    """``os.path.realpath(base/rel)`` for a ``base`` that is a real path already: only rel's own
    components are looked at, an lstat each (realpath would walk base's every component again,
    for every output of every step). A symlink or ``..`` among them hands the whole path to
    realpath; a missing component is kept as realpath keeps it."""
    if rel.startswith("/"):
        return os.path.realpath(os.path.join(base, rel))  # (join keeps the absolute one)
    path = base
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            return os.path.realpath(os.path.join(base, rel))
        path = f"{path}/{part}" if path != "/" else f"/{part}"
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.realpath(os.path.join(base, rel))
        except OSError:
            continue  # missing (or unreadable): realpath goes on past it in the same way
    return path


def relative(root: Path, path: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()
