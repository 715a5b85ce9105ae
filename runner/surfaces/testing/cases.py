"""Finding pipeline files and their fixtures, and checking one case against its snapshots."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ...errors import RunnerError, UsageError

# A case lands at <this>/<pipeline path from rootdir, without .yaml>/<fixture>/<step>.txt: the
# default puts pipelines/report.yaml in tests/__snapshots__/pipelines/report/ (docs/snapshots.md).
DEFAULT_SNAPSHOT_DIR = "tests/__snapshots__"
_PIPELINE_MARK = re.compile(r"^runner:\s*1\s*(#.*)?$", re.MULTILINE)
_SKIP_DIRS = frozenset(
    {".git", ".runner", ".venv", "venv", "node_modules", "__snapshots__", "__pycache__"}
)


def is_pipeline_file(path: Path) -> bool:
    """A ``.yaml``/``.yml`` file with a top-level ``runner: 1`` line (cheap: no YAML parse)."""
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        return bool(_PIPELINE_MARK.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def find_pipelines(directories: Iterable[Path]) -> list[Path]:
    """Every pipeline file under ``directories`` (recursively), sorted, state dirs skipped."""
    found: set[Path] = set()
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in directory.rglob("*"):
            rel = path.relative_to(directory).parts[:-1]
            if any(part in _SKIP_DIRS for part in rel):
                continue
            if is_pipeline_file(path):
                found.add(path)
    return sorted(found)


def fixtures_or_default(path: Path) -> list[str | None]:
    """The ``tests:`` fixture names of a pipeline; ``[None]`` (default params) when it has none
    or cannot be loaded (the case then fails with the pipeline's error)."""
    from ...engine.plan.render import fixture_names

    try:
        names: list[str | None] = list(fixture_names(path))
    except RunnerError:
        return [None]
    return names or [None]


def pipeline_cases(*directories: Path | str, rootdir: Path | None = None) -> list[Any]:
    """``pytest.param(path, fixture)`` for every pipeline file and fixture under ``directories``.

    For a parametrized test: ``@pytest.mark.parametrize("path, fixture", pipeline_cases(...))``.
    """
    base = rootdir or Path.cwd()
    params = []
    for path in find_pipelines(Path(d) for d in directories):
        try:
            shown = path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            shown = path.name
        for fixture in fixtures_or_default(path):
            params.append(pytest.param(path, fixture, id=f"{shown}:{fixture or 'default'}"))
    return params


def snapshot_dir_of(config: pytest.Config) -> Path:
    """``--runner-snapshot-dir``, else the ``runner_snapshot_dir`` ini value, under rootdir."""
    value = config.getoption("runner_snapshot_dir", None)
    if not value:
        try:
            value = config.getini("runner_snapshot_dir")
        except ValueError:  # the plugin is not loaded (check_pipeline called from a test module)
            value = None
    path = Path(str(value or DEFAULT_SNAPSHOT_DIR))
    return path if path.is_absolute() else config.rootpath / path


def check_pipeline(
    item: pytest.Item, path: Path, fixture: str | None, *, snapshot_dir: Path | None = None
) -> None:
    """Render ``path`` for ``fixture`` and compare every prompt with its snapshot.

    Fails the test (no traceback) with the pipeline's file:line:column message when it does not
    validate, compile or render, and with the per-step diffs when a render changed.
    """
    from ...engine.plan.render import render_pipeline
    from .snapshots import case_directory, compare_renders, failure_message

    config = item.config
    title = f"{_shown(path, config.rootpath)} [{fixture or 'default'}]"
    try:
        result = render_pipeline(path, fixture=fixture)
    except RunnerError as exc:
        error: RunnerError | None = exc
    else:
        error = None
    if error is not None:  # failed outside the except block: no chained traceback
        note = f"\n  (while rendering fixture '{fixture}')" if fixture else ""
        if fixture is None and isinstance(error, UsageError):
            note = "\n  (a pipeline with required params needs a `tests:` fixture that sets them)"
        pytest.fail(f"{error}{note}", pytrace=False)
    directory = case_directory(
        snapshot_dir or snapshot_dir_of(config), path, config.rootpath, fixture
    )
    failures = compare_renders(item, result.texts(), directory)
    if failures:
        pytest.fail(failure_message(title, failures, config.rootpath), pytrace=False)


def _shown(path: Path, rootdir: Path) -> str:
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return str(path)
