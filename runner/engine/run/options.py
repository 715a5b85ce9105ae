"""The options of one apply (the CLI's flags and runner.toml's settings, resolved)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .outcomes import StepOutcome

if TYPE_CHECKING:
    from .files import FileHasher


@dataclass
class ApplyOptions:
    """How an apply runs: jobs, forced steps, the item, budgets, the executor."""

    jobs: int = field(default_factory=lambda: os.cpu_count() or 2)
    force: frozenset[str] = frozenset()
    # Gates that ask again though another run decided on the same inputs (`--reask`).
    reask: frozenset[str] = frozenset()
    dry_run: bool = False
    item: str | None = None
    kind: str = "run"
    parent_run_id: str | None = None
    reference_asset: str | None = None
    run_id: str | None = None
    resume_run_id: str | None = None
    wall_clock: float | None = None
    max_steps: int | None = None
    token_budget: int | None = None
    max_cost: float | None = None  # --max-cost: this run's real spend (and the plan's estimate)
    retry_uncertain: bool = False  # send again calls whose reply was lost (may pay twice)
    # A remote cache URL (`--remote`; else [cache] remote in runner.toml). remote_only: take
    # what the remote has and run nothing else (`runner cache pull`).
    remote: str | None = None
    remote_only: bool = False
    # Where step bodies run: "local", or "dask" (a LocalCluster of `workers` processes with
    # `threads` threads each, or the cluster at `scheduler`); None: runner.toml's [executor]
    # decides (else local), these win over its keys. jobs_given: --jobs was set (else dask keeps
    # as many bodies asked for as executors.DaskExecutor.slots says).
    executor: str | None = None
    scheduler: str | None = None
    workers: int | None = None
    threads: int | None = None
    jobs_given: bool = False
    # Outcomes known to hold (watch: steps no changed file reaches), used without resolving.
    reuse: dict[str, StepOutcome] = field(default_factory=dict)
    # File signatures already read (watch: the table, and the files its check hashed), else
    # the journal's table is read as the run starts. Each is checked against a stat as used.
    hasher: FileHasher | None = None
    # Shell steps whose outputs the caller just found as regular files below the root, no part
    # a symlink (watch: surfaces/watchreuse.py): preflight.check_plan need not look at them.
    outputs_found: frozenset[str] = frozenset()
