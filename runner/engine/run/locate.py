"""Where a project's state lives (kept import-light: the no-op fast path needs only this).

One project, one state, found the way git and DVC find theirs: walk up from the pipeline
file's directory (or, for a command given no pipeline, from the working directory) to the
project root, and keep the state in ``.runner/`` there. The root is the nearest directory holding
``runner.toml``; failing that, the nearest holding ``.runner/``; failing that, the starting
directory. ``runner.toml`` wins over a nearer bare ``.runner/`` because the only way a bare
``.runner/`` sits below a ``runner.toml`` is an earlier version's state kept beside a pipeline
(``pipelines/.runner``): that one is moved to the root (or, if the root already has a journal,
left alone), with one line on stderr saying so. ``--state DIR`` / ``$RUNNER_STATE`` override.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STATE_NAME = ".runner"
MARKER_NAME = "runner.toml"
STATE_HELP = (
    "State directory (journal, objects, logs). Default: .runner/ at the project root, the "
    "nearest directory above the pipeline (or the working directory) holding runner.toml or "
    ".runner/. Also $RUNNER_STATE."
)


def project_root(start: Path) -> Path | None:
    """The project root above ``start`` (a directory), or None when no marker is found."""
    here = start.resolve()
    bare: Path | None = None
    for directory in (here, *here.parents):
        if (directory / MARKER_NAME).is_file():
            return directory
        if bare is None and (directory / STATE_NAME).is_dir():
            bare = directory
    return bare


def _override(override: str | os.PathLike[str] | None) -> Path | None:
    if override:
        return Path(override).resolve()
    env = os.environ.get("RUNNER_STATE")
    return Path(env).resolve() if env else None


def state_dir_for(pipeline_file: Path, override: str | os.PathLike[str] | None = None) -> Path:
    """``--state`` wins, then $RUNNER_STATE, then ``.runner/`` at the pipeline's project root."""
    explicit = _override(override)
    if explicit is not None:
        return explicit
    here = pipeline_file.resolve().parent
    root = project_root(here) or here
    state = root / STATE_NAME
    if root != here:
        _adopt_legacy(here / STATE_NAME, state, root)
    return state


def unmarked_new_state(
    pipeline_file: Path, state: Path, override: str | os.PathLike[str] | None = None
) -> bool:
    """True when ``state`` (from ``state_dir_for``) does not exist yet and nothing chose it: no
    ``--state``, no $RUNNER_STATE, no runner.toml or .runner/ above the pipeline. An apply is
    then about to make a new state in the pipeline's folder, which the user should be told."""
    if _override(override) is not None or (state / "journal.db").exists():
        return False
    return project_root(pipeline_file.resolve().parent) is None


def state_dir_here(override: str | os.PathLike[str] | None = None) -> Path:
    """The state for a command given no pipeline file: found from the working directory."""
    explicit = _override(override)
    if explicit is not None:
        return explicit
    cwd = Path.cwd().resolve()
    root = project_root(cwd)
    if root is not None:
        state = root / STATE_NAME
        # From the root of a project an earlier version ran, its state is beside the pipelines.
        if not (state / "journal.db").exists():
            _adopt_legacy(root / "pipelines" / STATE_NAME, state, root)
        return state
    legacy = cwd / "pipelines" / STATE_NAME
    if (legacy / "journal.db").exists():
        return legacy  # an earlier version's layout with no marker at all: use it in place
    # No project here: a state made now would hold nothing, and "no journal at
    # <cwd>/.runner/journal.db" would not say why. Say what was looked for and the way out.
    from ...errors import UsageError

    raise UsageError(
        f"no runner.toml or .runner/ found in {cwd} or any directory above it: this is not a "
        "runner project",
        hint="cd into a project (runner init makes one), or name its state with --state DIR "
        "(or $RUNNER_STATE)",
    )


def _adopt_legacy(old: Path, new: Path, root: Path) -> None:
    """Move an earlier version's state (``old``, beside a pipeline) to the project's ``new``."""
    if not (old / "journal.db").is_file():
        return
    from ...source.termtext import safe  # directory names are data

    shown_old, shown_new = safe(_shown(old, root)), safe(_shown(new, root))
    if (new / "journal.db").exists():
        print(
            f"runner: ignoring the old state {shown_old} (this project's state is {shown_new};"
            " delete the old one when it is no longer needed)",
            file=sys.stderr,
        )
        return
    try:
        if new.exists():
            new.rmdir()  # only an empty directory is replaced; anything else stays put
        old.rename(new)
    except OSError as exc:
        print(
            f"runner: cannot move the old state {shown_old} to {shown_new}: {safe(exc)}",
            file=sys.stderr,
        )
        return
    print(
        f"runner: moved the state {shown_old} to {shown_new} (one state per project)",
        file=sys.stderr,
    )


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
