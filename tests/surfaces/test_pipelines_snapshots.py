"""Every pipeline in pipelines/ and examples/ renders, and its prompts match their snapshots.

The snapshots live in tests/__snapshots__/<pipeline path>/ (one text file per prompt step);
review a changed prompt like code and accept it with ``pytest --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.surfaces.testing import check_pipeline, pipeline_cases

REPO = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize(
    "path, fixture", pipeline_cases(REPO / "pipelines", REPO / "examples", rootdir=REPO)
)
def test_pipeline_prompts_match_snapshots(
    request: pytest.FixtureRequest, path: Path, fixture: str | None
) -> None:
    check_pipeline(request.node, path, fixture)
