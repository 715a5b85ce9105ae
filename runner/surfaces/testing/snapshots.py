"""Prompt renders compared with syrupy snapshots: one readable text file per prompt step.

Layout: ``<snapshot dir>/<pipeline path without .yaml>/<fixture>/<step id>.txt``. Each file is
compared through a syrupy ``SnapshotAssertion`` bound to the running syrupy session, so
``--snapshot-update`` writes it, a missing one fails, and syrupy's summary counts it. A step
whose snapshot file exists but which no longer renders is reported (and removed on update) here,
per pipeline and fixture, instead of by syrupy's module-based unused-snapshot detection.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.data import SnapshotCollections
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation
from syrupy.terminal import disable_color

if TYPE_CHECKING:
    from syrupy.types import SnapshotIndex

SUFFIX = ".txt"
DEFAULT_FIXTURE = "default"  # the one case of a pipeline without `tests:`


@dataclass(frozen=True)
class StepLocation(PyTestLocation):
    """Where one step's snapshot lives; the pytest item is the pipeline case that renders it."""

    directory: str = ""
    step: str = ""

    def __post_init__(self) -> None:
        # Our items have no Python function behind them: name the snapshot after the step.
        object.__setattr__(self, "filepath", str(Path(self.directory) / (self.step + SUFFIX)))
        object.__setattr__(self, "modulename", "runner.surfaces.testing")
        object.__setattr__(self, "methodname", self.step)
        object.__setattr__(self, "nodename", self.step)
        object.__setattr__(self, "testname", self.step)


class PromptSnapshotExtension(SingleFileSnapshotExtension):
    """Plain UTF-8 text files named after the step, in the case's own directory."""

    _write_mode = WriteMode.TEXT
    file_extension = SUFFIX[1:]

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        if isinstance(test_location, StepLocation):
            return test_location.directory
        return super().dirname(test_location=test_location)

    @classmethod
    def discovery_dirname(cls, *, test_location: PyTestLocation) -> str:
        return cls.dirname(test_location=test_location)

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        return test_location.testname

    @classmethod
    def get_file_basename(cls, *, test_location: PyTestLocation, index: SnapshotIndex) -> str:
        return test_location.testname

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        return True

    def discover_snapshots(
        self, *, test_location: PyTestLocation, ignore_extensions: list[str] | None = None
    ) -> SnapshotCollections:
        # Stale step snapshots are found per case (see compare_renders), not by syrupy.
        return SnapshotCollections()


def case_directory(snapshot_dir: Path, pipeline: Path, rootdir: Path, fixture: str | None) -> Path:
    """The directory holding the snapshots of one pipeline file and fixture."""
    try:
        rel = pipeline.resolve().relative_to(rootdir.resolve())
    except ValueError:
        rel = Path(pipeline.name)
    return snapshot_dir / rel.with_suffix("") / (fixture or DEFAULT_FIXTURE)


@dataclass
class Mismatch:
    step: str
    file: Path
    detail: list[str]


def compare_renders(item: pytest.Item, texts: dict[str, str], directory: Path) -> list[Mismatch]:
    """Compare each step's text with its snapshot; return what does not match.

    Under ``--snapshot-update`` the snapshots are written (and stale ones removed) instead.
    """
    config = item.config
    session: Any = getattr(config, "_syrupy", None)
    if session is None:
        pytest.fail(
            "runner's pipeline snapshots need the syrupy plugin (it is disabled)", pytrace=False
        )
    update = bool(config.option.update_snapshots)
    failures: list[Mismatch] = []
    for step, text in texts.items():
        assertion = SnapshotAssertion(
            update_snapshots=update,
            update_new_snapshots_only=bool(config.option.update_new_snapshots_only),
            extension_class=PromptSnapshotExtension,
            test_location=StepLocation(item, directory=str(directory), step=step),
            session=session,
        )
        matched = bool(assertion == text)  # syrupy records the result (and writes on update)
        if not matched:
            with disable_color() if config.option.no_colors else nullcontext():
                detail = assertion.get_assert_diff(diff_mode=config.option.diff_mode)
            failures.append(Mismatch(step, directory / (step + SUFFIX), detail))
    for stale in sorted(directory.glob("*" + SUFFIX)) if directory.is_dir() else []:
        if stale.stem in texts:
            continue
        if update:
            stale.unlink()
        else:
            failures.append(
                Mismatch(
                    stale.stem,
                    stale,
                    ["the snapshot exists but the step renders no prompt any more"],
                )
            )
    return failures


def failure_message(title: str, failures: list[Mismatch], rootdir: Path) -> str:
    """A readable report: the case, then per step its snapshot file and the diff."""
    lines = [f"{title}: {len(failures)} prompt snapshot(s) do not match"]
    for f in failures:
        try:
            shown = f.file.resolve().relative_to(rootdir.resolve())
        except ValueError:
            shown = f.file
        lines.append(f"step '{f.step}' ({shown}):")
        lines.extend("    " + line for line in f.detail)
    lines.append("review the change, then accept it with: pytest --snapshot-update")
    return "\n".join(lines)
