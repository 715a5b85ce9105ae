"""What `runner watch` watches for one compiled pipeline, and which file events count.

The set is the pipeline file, every file a step reads (``StepType.reads`` over the arguments
that can be evaluated before running), rule files (``*_file`` arguments of checks) and the globs
of ``read`` steps, minus the pipeline's outputs. Directories are watched, not files, because
editors save by writing a temporary file and renaming it over the original.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import expr as ex
from ..pipeline.compiler import Plan
from ..state.filedigest import sha256_file

# Editor droppings: vim backups (file~), swap files (.file.swp/.swo/...), vim's write test file
# (4913, 5036, ...), emacs lock files (.#file), LibreOffice locks.
_JUNK = re.compile(r"(~$|^\.#|^\..*\.sw[a-p]$|^[0-9]{4,5}$|^\.~lock\.)")
_JOURNAL_FILES = ("journal.db", "journal.db-wal")
_GLOB_CHARS = "*?["


def is_editor_junk(name: str) -> bool:
    """True for editor temp/backup file names that must never trigger a cycle."""
    return bool(_JUNK.search(name))


def norm_path(path: Path) -> Path:
    """Absolute path with its directory resolved (the file itself may not exist yet)."""
    path = path.absolute()
    return path.parent.resolve() / path.name


class DirResolver:
    """``norm_path`` for many paths below one root, each directory resolved once: a cycle's
    check of 1,000 steps' reads resolved every read's directory (~40 ms). Keep one only as long
    as the file system may be taken as unchanged (one check)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dirs: dict[str, str] = {}

    def text(self, rel: str) -> str:
        """``str(norm_path(root / rel))``."""
        head, name = os.path.split(rel)
        if name in ("", ".", ".."):  # not a file's name: Path reads these its own way
            return str(norm_path(self.root / rel))
        resolved = self._dirs.get(head)
        if resolved is None:
            resolved = self._dirs[head] = str((self.root / head).absolute().resolve())
        return os.path.join(resolved, name)

    def path(self, rel: str) -> Path:
        return Path(self.text(rel))


def _existing_dir(path: Path) -> Path:
    """``path`` if it is a directory, else its nearest existing ancestor."""
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path


def sha256_or_none(path: Path) -> str | None:
    """Content hash of ``path``; None when it does not exist or is not a regular file."""
    try:
        return sha256_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None


@dataclass(frozen=True)
class WatchSet:
    """What to watch for one compiled pipeline, and which events count."""

    root: Path
    files: frozenset[Path]
    globs: tuple[tuple[Path, str], ...] = ()  # (base directory, pattern relative to the root)
    excluded: frozenset[Path] = frozenset()  # declared outputs
    state_dir: Path | None = None
    journal: bool = False  # also watch the journal (a run is awaiting a human decision)
    # Per step, the files it reads (None: not knowable before it runs); and the files that are
    # only ever data (shell `inputs`, `read` paths): a change to those alone keeps the plan.
    step_reads: Mapping[str, frozenset[Path] | None] = dataclasses.field(default_factory=dict)
    data_files: frozenset[Path] = frozenset()

    def directories(self) -> list[Path]:
        """The directories to watch (non-recursively), each existing."""
        dirs = {_existing_dir(p.parent) for p in self.files}
        dirs |= {_existing_dir(base) for base, _ in self.globs}
        if self.journal and self.state_dir is not None:
            dirs.add(self.state_dir)
        return sorted(dirs)

    def journal_paths(self) -> frozenset[Path]:
        if self.state_dir is None:
            return frozenset()
        return frozenset(self.state_dir / n for n in _JOURNAL_FILES)

    def matches_glob(self, path: Path) -> bool:
        for base, pattern in self.globs:
            try:
                rel = path.relative_to(self.root).as_posix()
            except ValueError:
                continue
            if path.is_relative_to(base) and fnmatch.fnmatchcase(rel, pattern):
                return True
        return False

    def accepts(self, path: Path) -> bool:
        """Does an event on ``path`` possibly matter? (content is checked later)"""
        if is_editor_junk(path.name) or path in self.excluded:
            return False
        if self.state_dir is not None and path.is_relative_to(self.state_dir):
            return self.journal and path in self.journal_paths()
        return path in self.files or self.matches_glob(path)


def _probe_args(plan: Plan, sid: str) -> dict[str, Any]:
    """The step's top-level arguments that can be evaluated before running (params only)."""
    step = plan.steps[sid]
    if not isinstance(step.args, dict):
        return {}
    context = {
        "params": plan.params,
        "steps": {},
        "run": {"id": "watch", "item": None},
        "feedback": [],
        "attempt": 1,
    }
    out: dict[str, Any] = {}
    for key, value in step.args.items():
        if ex.is_static(value):
            out[key] = value
            continue
        # A value that needs an upstream output or the for_each item is unknown until run time;
        # skipping it before evaluating keeps this cheap (evaluation compiles the expression).
        if any(r.root != "params" for e in ex.iter_expressions(value) for r in e.refs):
            continue
        with contextlib.suppress(Exception):
            out[key] = ex.evaluate_value(value, context)
    return out


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in _GLOB_CHARS)


def _glob_base(root: Path, pattern: str) -> Path:
    """The deepest directory of ``pattern`` without glob characters (new matches appear there;
    matches in deeper directories are caught through their parents once they are read)."""
    magic = min(pattern.index(c) for c in _GLOB_CHARS if c in pattern)
    prefix = pattern[:magic]
    base = root / prefix.rsplit("/", 1)[0] if "/" in prefix else root
    return base.resolve()


def _rule_files(rule: Any) -> Iterable[str]:
    """The files a rule reads, as the step's key names them (a schema file, an exec check's
    script and declared inputs): one list for the key, the fingerprint and the watch."""
    files: Mapping[str, bool] = rule.files()
    return files


def watch_set_for(
    plan: Plan,
    state_dir: Path | None = None,
    *,
    produced: Iterable[str] = (),
    journal: bool = False,
) -> WatchSet:
    """The files and globs ``plan`` reads, minus its outputs (declared or ``produced``)."""
    root = plan.root
    files: set[Path] = {norm_path(plan.file)}
    globs: list[tuple[Path, str]] = []
    outputs: set[Path] = {norm_path(root / rel) for rel in produced}
    step_reads: dict[str, frozenset[Path] | None] = {}
    data: set[Path] = set()
    other: set[Path] = set()
    for sid in plan.order:
        step = plan.steps[sid]
        args = _probe_args(plan, sid)
        for rel in args.get("outputs") or () if step.uses == "shell" else ():
            if isinstance(rel, str):
                outputs.add(norm_path(root / rel))
        pattern = args.get("path")
        if step.uses == "read" and isinstance(pattern, str) and _is_glob(pattern):
            globs.append((_glob_base(root, pattern), pattern))
        known = (
            isinstance(step.args, dict)
            and set(args) == set(step.args)
            and step.for_each is None
            and not (step.uses == "read" and isinstance(pattern, str) and _is_glob(pattern))
        )
        try:
            read = step.type.reads(args, root=root)
        except Exception:  # arguments unknown before the run (KeyError, a bad path): skip
            read, known = [], False
        paths = frozenset(norm_path(root / rel) for rel in read)
        files.update(paths)
        step_reads[sid] = paths if known else None
        (data if step.uses in ("shell", "read") else other).update(paths)
        for rule in [r for r in (step.when, *step.checks) if r is not None]:
            files.update(norm_path(root / rel) for rel in _rule_files(rule))
    state = state_dir.resolve() if state_dir is not None else None
    return WatchSet(
        root=root.resolve(),
        files=frozenset(files - outputs),
        globs=tuple(globs),
        excluded=frozenset(outputs),
        state_dir=state,
        journal=journal,
        step_reads=step_reads,
        data_files=frozenset(data - other - {norm_path(plan.file)}),
    )
