"""The plan document (``runner plan --json``, ``explain --json``, ``apply --dry-run``): the
forecast of every step and element, the provider calls with their estimated cost, the budget.

Shape::

    {"pipeline": str, "would_change": bool,
     "summary": {action: steps},          # actions: run cached restore unknown skip ask
     "executions": {action: count},       # steps without for_each count once, else per element
     "steps": [{"id", "uses", "action", "reasons": [str], "key": str|null,
                "elements": [{"index", "action", "reasons", "key"}], "counts": {...}}],
     "cost": {"calls": [{"provider", "model", "kind", "calls", "cost": float|null, "exact"}],
              "total": float, "currency": str, "unpriced_calls": int, "exact": bool},
     "budget": {"limit": float, "source": str, "over": bool} | null,
     "exit_code": int}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plan_document(
    file: Path,
    overrides: dict[str, str],
    state_dir: str | None,
    force: tuple[str, ...] = (),
    item: str | None = None,
    max_cost: float | None = None,
    plan: Any = None,
    *,
    reask: tuple[str, ...] = (),
    retry_uncertain: bool = False,
) -> tuple[dict[str, Any], Any]:
    """Compile (unless given), forecast and price. Returns (the --json document, the Forecast).

    ``force``, ``reask`` and ``retry_uncertain`` are apply's flags of the same names: the plan
    of an apply given them (every flag of apply that changes what runs is one of plan's).

    While the no-op fast path's fingerprint holds (nothing the converged run read has changed;
    the pipeline at most in comments or layout), the forecast is read from it: every step
    cached, without compiling or evaluating a key.

    Reads only: the journal is opened read-only when it exists and not created when it does not.
    """
    from ..run.locate import state_dir_for
    from .costs import estimate, load_prices

    state_path = state_dir_for(file, state_dir)
    fc = None
    if plan is None and not force and not reask and not retry_uncertain:
        fc, limit = _from_fingerprint(state_path, file, overrides, item)
    if fc is not None:
        directory, pipeline_limit = Path(limit["directory"]), limit["max_cost"]
        limit_source = f"{limit['file']} limits.max_cost"
    else:
        plan, fc = _forecast(
            file, overrides, state_path, force, item, plan, reask, retry_uncertain
        )
        directory, pipeline_limit = plan.directory, plan.limits.max_cost
        limit_source = f"{plan.file.name} limits.max_cost"
    prices = load_prices(directory)
    est = estimate(fc, prices)
    budgets = _budgets(prices, max_cost, pipeline_limit, limit_source)
    over = bool(budgets) and est.total > min(budgets)[0]
    executions: dict[str, int] = {}
    for s in fc.steps:
        for e in s.elements if s.elements is not None else [s]:
            executions[e.action.value] = executions.get(e.action.value, 0) + 1
    doc: dict[str, Any] = {
        "pipeline": fc.pipeline,
        "would_change": fc.changes,
        "summary": fc.summary(),
        "executions": executions,
        "steps": [s.to_json() for s in fc.steps],
        "cost": est.to_json(),
        "budget": (
            {"limit": min(budgets)[0], "source": min(budgets)[1], "over": over} if budgets else None
        ),
        "exit_code": 0,
    }
    from ...expr.commandscope import confinement_of

    if plan is not None:
        said = {sid: confinement_of(step) for sid, step in plan.steps.items()}
    else:  # the fingerprint recorded what the compiled steps said
        said = {
            s["id"]: {k: s[k] for k in ("sandbox", "network") if k in s} for s in limit["steps"]
        }
    for step_doc in doc["steps"]:
        step_doc.update(said.get(step_doc["id"]) or {})
    # (the fingerprint's path: no image step, so no run folder to look at)
    doc["run_folder_edits"] = [] if plan is None else _run_folder_edits(state_path, plan, item)
    return doc, fc


def _run_folder_edits(state_path: Path, plan: Any, item: str | None) -> list[str]:
    """Finals edited by hand in the folder of the item's last image run (runner/state/runfolder)."""
    from types import SimpleNamespace

    if not any(s.uses == "image" for s in plan.steps.values()):
        return []
    if not (state_path / "journal.db").exists():
        return []
    from ...state.runfolder import last_run_edits
    from ..run.apply import resolve_item

    with read_state(state_path) as (journal, objects):
        state = SimpleNamespace(dir=state_path, journal=journal, objects=objects)
        return [str(p) for p in last_run_edits(state, plan.name, resolve_item(plan, item))]


def _forecast(
    file: Path,
    overrides: dict[str, str],
    state_path: Path,
    force: tuple[str, ...],
    item: str | None,
    plan: Any,
    reask: tuple[str, ...] = (),
    retry_uncertain: bool = False,
) -> tuple[Any, Any]:
    """The compiled plan and the planner's forecast (the full path). Raises UsageError for a
    --force that names no step or a --reask that names no human_gate (as apply does)."""
    from ...errors import UsageError
    from ...pipeline.compiler import compile_pipeline
    from .planner import forecast

    plan = plan or compile_pipeline(file, overrides)
    for f in force:
        if f not in plan.steps:
            raise UsageError(f"--force: unknown step '{f}'")
    check_reask(plan, reask)
    forced = frozenset(plan.downstream(set(force))) if force else frozenset()
    with read_state(state_path) as (journal, objects):
        return plan, forecast(
            plan,
            journal,
            objects,
            state_path,
            forced,
            item,
            reask=frozenset(reask),
            retry_uncertain=retry_uncertain,
        )


def check_reask(plan: Any, reask: tuple[str, ...]) -> None:
    """Raises UsageError for a --reask that names no human_gate step of ``plan``."""
    from ...errors import UsageError

    for g in reask:
        if g not in plan.steps or plan.steps[g].uses != "human_gate":
            raise UsageError(f"--reask: '{g}' is not a human_gate step of {plan.name}")


def _from_fingerprint(
    state_path: Path, file: Path, overrides: dict[str, str], item: str | None
) -> tuple[Any, dict[str, Any]]:
    """(the forecast, its budget facts) from a fingerprint that holds, else (None, {})."""
    from ...state import overrides as edits
    from . import fastpath
    from .forecast import from_fingerprint

    held = fastpath.check(state_path, file.resolve(), overrides, item, remember=False)
    fc = from_fingerprint(held) if held is not None else None
    if held is None or fc is None:
        return None, {}
    if "validate" in held:
        # Only values no key depends on changed: the forecast holds if they are valid, which
        # the schema checks (an invalid one is reported as the full path reports it).
        from ...pipeline.loader import load_document

        load_document(file)
    with read_state(state_path) as (journal, _objects):
        if edits.any_active(journal, held["name"]):
            return None, {}  # the planner words an edit that holds: let it
    return fc, held["forecast"]


def _budgets(
    prices: Any, max_cost: float | None, pipeline_limit: float | None, pipeline_source: str
) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    if max_cost is not None:
        out.append((max_cost, "--max-cost"))
    if pipeline_limit is not None:
        out.append((float(pipeline_limit), pipeline_source))
    if prices.max_cost is not None:
        out.append((prices.max_cost, "runner.toml [budget] max_cost"))
    return out


class read_state:
    """The state's journal for reading, or an in-memory empty one when nothing has run yet."""

    def __init__(self, state_path: Path) -> None:
        self.path = state_path
        self.journal: Any = None

    def __enter__(self) -> tuple[Any, Any]:
        import sqlite3

        from ...state.journal import Journal
        from ...state.objects import ObjectStore

        if _has_schema(self.path / "journal.db"):
            self.journal = Journal.open(self.path, readonly=True)
        else:
            # a plan never creates the state directory, nor the schema of a journal an apply
            # killed before its first migration left (it would migrate it: a write)
            from ...state.records import lost_journal, orphaned_objects

            objects = orphaned_objects(self.path)
            if objects:
                raise lost_journal(self.path / "journal.db", objects)
            self.journal = Journal(sqlite3.connect(":memory:"), self.path / "journal.db")
            self.journal._migrate()
        return self.journal, ObjectStore(self.path / "objects")

    def __exit__(self, *exc: object) -> None:
        self.journal.close()


def _has_schema(path: Path) -> bool:
    """Whether the journal at ``path`` has its tables (read only; a journal that cannot be read
    counts as one: opening it says what is wrong)."""
    import sqlite3

    try:
        if path.stat().st_size == 0:
            return False
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except (FileNotFoundError, sqlite3.Error):
        return path.exists()
    try:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name='runs'").fetchone() is not None
    except sqlite3.Error:
        return True
    finally:
        conn.close()


def _may_price(toml: Path) -> bool:
    """Whether runner.toml has a [budget] or [prices] table (or cannot be read as TOML, which
    the cost model and the provider config report): a project's runner.toml that only marks
    its root or names providers sets no budget."""
    from ...source.tomlfile import loads_toml

    try:
        data = loads_toml(toml.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: UnicodeDecodeError, tomllib's TOMLDecodeError
        return True
    return "budget" in data or "prices" in data


def check_budget_first(
    file: Path,
    plan: Any,
    overrides: dict[str, str],
    state_dir: str | None,
    force: tuple[str, ...],
    item: str | None,
    max_cost: float | None,
    *,
    reask: tuple[str, ...] = (),
    retry_uncertain: bool = False,
) -> None:
    """Before an apply: when any budget is set, plan and refuse (OverBudget) above it."""
    if max_cost is None and plan.limits.max_cost is None:
        from ...source.tomlfile import find_runner_toml

        toml = find_runner_toml(plan.directory)
        if toml is None or not _may_price(toml):
            return  # no budget anywhere: the cost model is not even imported (~10 ms)
    from .costs import check_budget, estimate, load_prices

    prices = load_prices(plan.directory)
    budgets = _budgets(
        prices, max_cost, plan.limits.max_cost, f"{plan.file.name} limits.max_cost"
    )
    if not budgets:
        return  # no budget: no planning cost on the apply's path
    _doc, fc = plan_document(
        file,
        overrides,
        state_dir,
        force,
        item,
        max_cost,
        plan=plan,
        reask=reask,
        retry_uncertain=retry_uncertain,
    )
    check_budget(estimate(fc, prices), budgets)
