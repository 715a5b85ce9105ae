"""The pytest plugin: snapshot tests for the prompts of runner pipelines.

Every pipeline file (``*.yaml`` with ``runner: 1``) under a directory named by
``--runner-pipelines DIR`` or the ``runner_pipelines`` ini option becomes one test per
``tests:`` fixture (one with the default params when it has none). Each test validates, compiles
and renders the pipeline offline and compares every prompt step's render with its snapshot under
``runner_snapshot_dir``. The ``runner_render`` fixture renders a pipeline in hand-written tests.

Loaded through the ``pytest11`` entry point; it does nothing until one of its options is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from .cases import DEFAULT_SNAPSHOT_DIR, fixtures_or_default, is_pipeline_file

_DIRS = pytest.StashKey[list[Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("runner", "runner pipeline prompt snapshots")
    group.addoption(
        "--runner-pipelines",
        action="append",
        default=[],
        metavar="DIR",
        dest="runner_pipelines",
        help="Snapshot-test the prompts of every pipeline under DIR (repeatable).",
    )
    group.addoption(
        "--runner-snapshot-dir",
        default=None,
        metavar="DIR",
        dest="runner_snapshot_dir",
        help=f"Where prompt snapshots live (default: {DEFAULT_SNAPSHOT_DIR}).",
    )
    parser.addini(
        "runner_pipelines",
        "Directories whose pipelines' prompts are snapshot-tested.",
        type="linelist",
        default=[],
    )
    parser.addini(
        "runner_snapshot_dir",
        "Directory of the prompt snapshots (under rootdir).",
        default=DEFAULT_SNAPSHOT_DIR,
    )


def pytest_configure(config: pytest.Config) -> None:
    from_option = [Path(d).resolve() for d in config.getoption("runner_pipelines") or []]
    base = config.inipath.parent if config.inipath else config.rootpath
    from_ini = [(base / str(d)).resolve() for d in config.getini("runner_pipelines") or []]
    dirs = from_option + [d for d in from_ini if d not in from_option]
    config.stash[_DIRS] = dirs
    # Pipeline directories usually sit outside `testpaths`: add them to what pytest collects,
    # unless the ini option is set and the user named what to run.
    explicit_args = config.args_source is pytest.Config.ArgsSource.ARGS
    wanted = from_option if explicit_args else dirs
    for d in wanted:
        covered = any(_within(d, Path(a.split("::")[0]).resolve()) for a in config.args)
        if not covered:
            config.args.append(str(d))


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    dirs = parent.config.stash.get(_DIRS, [])
    if not dirs or file_path.suffix not in (".yaml", ".yml"):
        return None
    resolved = file_path.resolve()
    if not any(_within(resolved, d) for d in dirs) or not is_pipeline_file(file_path):
        return None
    collector: pytest.Collector = PipelineFile.from_parent(parent, path=file_path)
    return collector


class PipelineFile(pytest.File):
    """A pipeline file: one item per `tests:` fixture."""

    def collect(self) -> Iterator[pytest.Item]:
        for fixture in fixtures_or_default(self.path):
            yield PipelineCase.from_parent(self, name=fixture or "default", fixture=fixture)


class PipelineCase(pytest.Item):
    """Render one pipeline for one fixture; compare each prompt step with its snapshot."""

    def __init__(self, *, fixture: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixture = fixture

    def runtest(self) -> None:
        from .cases import check_pipeline

        check_pipeline(self, self.path, self.fixture)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name} [{self.name}]"


class RenderFn(Protocol):
    def __call__(
        self, path: str | Path, fixture: str | None = None, params: dict[str, Any] | None = None
    ) -> dict[str, str]: ...


@pytest.fixture
def runner_render(request: pytest.FixtureRequest) -> RenderFn:
    """``runner_render(path, fixture=None, params=None)`` -> {step id: rendered text}.

    A relative ``path`` is taken from pytest's rootdir. Raises runner's errors (InvalidPipeline,
    UsageError, RenderError) for a pipeline that does not render.
    """
    from ...engine.plan.render import render_pipeline

    root = request.config.rootpath

    def render(
        path: str | Path, fixture: str | None = None, params: dict[str, Any] | None = None
    ) -> dict[str, str]:
        p = Path(path)
        return render_pipeline(
            p if p.is_absolute() else root / p, fixture=fixture, params=params
        ).texts()

    return render
