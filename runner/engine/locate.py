"""Where a pipeline's state lives (kept import-light: the no-op fast path needs only this)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir_for(pipeline_file: Path, override: str | os.PathLike[str] | None = None) -> Path:
    """``--state`` wins, then $RUNNER_STATE, then ``.runner/`` beside the pipeline file."""
    if override:
        return Path(override).resolve()
    env = os.environ.get("RUNNER_STATE")
    if env:
        return Path(env).resolve()
    return pipeline_file.resolve().parent / ".runner"
