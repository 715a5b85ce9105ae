"""What the next apply would do, computed without doing any of it (``runner plan``, ``explain``,
``apply --dry-run``).

The planner walks the steps in order with the interpreter's own key code (``Interpreter._resolve``)
against the journal, opened for reading only. A step or element is *cached* (key matches a
completed execution whose objects are present), *restore* (cached, but an output file is missing
or was edited by hand), *run* (with why: never ran, which key part changed, cache off, forced),
*fail* (an output edited by hand, with ``on_edit: fail``), or *unknown*: its key reads an
upstream result that does not exist yet (an upstream that would run).
Unknown is found exactly, not guessed from the graph: upstream results that would change are an
``Unknown`` value in the expression context, and evaluating anything that touches one (an
attribute, an index, its text, its length) marks the element unknown. So
``steps.card.elements[index].output`` makes only element ``index`` unknown when only that card
would change.

Nothing here runs a step, calls a provider, or writes: no journal row, no object, no file (the
file-hash cache's new signatures are dropped, not saved).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import expr as ex
from ...errors import RunnerError, StepFailure
from ...pipeline.compiler import CachePolicy, CompiledStep, Plan
from ...pipeline.labels import element_labels
from ...state import overrides
from ...state.canonical import digest as canonical_digest
from ...state.journal import CachedResult, Journal
from ...state.objects import ObjectStore
from ...state.records import loads
from ..run import gates, gatestep
from ..run.keys import KeyParts, changed_parts, identities
from .forecast import (
    Action,
    Call,
    ElementForecast,
    Forecast,
    StepForecast,
    summarise,
)
from .history import ItemHistory
from .outputs import cached_outputs, rerun_fails, unknown_fails
from .planparts import CALL_STEPS as CALL_STEPS  # (runner/engine/run/rebuild.py reads it here)
from .planparts import in_batch, last_keyed, provider_calls
from .unknowns import ArgReader, PlanHasher, Touched, Unknown, holds_unknown

MAX_PASSES = 32  # as the interpreter's: one pass more per remembered revision


def forecast(
    plan: Plan,
    journal: Journal,
    objects: ObjectStore,
    state_dir: Path,
    force: frozenset[str] = frozenset(),
    item: str | None = None,
    *,
    reask: frozenset[str] = frozenset(),
    retry_uncertain: bool = False,
) -> Forecast:
    """Per step and element, what ``apply`` would do now, and why (``force``, ``reask`` and
    ``retry_uncertain`` as apply's flags). Reads only."""
    from ..run.apply import _LazyProviders, resolve_item
    from ..run.interpreter import Interpreter
    from ..run.options import ApplyOptions

    item = resolve_item(plan, item)
    # The apply would continue a run waiting at a gate (same run id: `run.id` keeps its value).
    waiting = [
        r["id"]
        for r in journal.active_runs(plan.name, item)
        if r["status"] in ("awaiting_human", "awaiting_batch")
    ]
    interp = Interpreter(
        plan,
        journal=journal,
        objects=objects,
        state_dir=state_dir,
        options=ApplyOptions(
            item=item,
            force=force,
            reask=reask,
            retry_uncertain=retry_uncertain,
            dry_run=True,
            run_id=waiting[0] if waiting else None,
        ),
        providers=_LazyProviders(plan.root),
    )
    return _Planner(plan, interp, force).run()


class _Planner:
    def __init__(self, plan: Plan, interp: Any, force: frozenset[str]) -> None:
        self.plan = plan
        self.interp = interp
        self.journal: Journal = interp.journal
        self.force = force
        self.hasher = PlanHasher(self.journal)
        interp.reuse.hasher = self.hasher
        self.cached = self.journal.cached_results(plan.name, steps=plan.steps.keys())
        self.edited = overrides.any_active(self.journal, plan.name)
        self.present: dict[str, frozenset[str]] = {}  # step -> its items' identities (edits)
        self.outcomes: dict[str, StepForecast] = {}
        self.predicted: dict[tuple[str, int], Any] = {}  # (step, element) -> computed output
        self.again = False  # a remembered revision: forecast again with its review
        self.review_rows: dict[str, list[gates.DecisionRow]] = {}  # target -> its revisions
        self.rejected: set[str] = set()  # gates a remembered rejection ends
        self.adopted: dict[str, list[gates.DecisionRow]] = {}  # gate -> revisions taken again
        self.in_batch: dict[tuple[str, int], str] = {}  # (step, element) -> the batch holding it
        self.history = ItemHistory(
            self.journal, plan.name, interp.options.item, interp.state_dir
        )  # why an element would run: its value's last execution, what gc removed

    def run(self) -> Forecast:
        # As the apply does: a revision remembered at a gate sends its target round again with
        # the review (gatestep.py), so the forecast is made again from the start with it.
        for _ in range(MAX_PASSES):
            self.again = False
            steps = []
            for sid in self.plan.order:
                sf = self._step(self.plan.steps[sid])
                self.outcomes[sid] = sf
                steps.append(sf)
                if self.again:
                    break
            if not self.again:
                return Forecast(self.plan.name, steps)
            self.outcomes, self.predicted, self.rejected = {}, {}, set()
            self.interp.context_steps = {}
            self.hasher = PlanHasher(self.journal)
            self.interp.reuse.hasher = self.hasher
        return Forecast(self.plan.name, steps)

    # -- one step ---------------------------------------------------------------------------

    def _ctx(self, **extra: Any) -> dict[str, Any]:
        ctx: dict[str, Any] = self.interp._context(**extra)
        return ctx

    def _step(self, step: CompiledStep) -> StepForecast:
        for d in step.deps:
            if d in self.rejected:
                return self._skip(step, f"rejected at '{d}'")
            up = self.outcomes[d]
            if up.action is Action.SKIP and step.on_skipped != "run":
                return self._skip(step, f"upstream '{d}' would be skipped")
            if up.action is Action.FAIL:
                return self._skip(step, f"upstream '{d}' would fail")
        if step.when is not None:
            verdict = self._when(step)
            if verdict is not None:
                return verdict
        if getattr(step.type, "is_gate", False):
            return self._gate(step)
        sf = self._step_body(step)
        gate = next((d for d in step.deps if self.outcomes[d].action is Action.ASK), None)
        if gate is not None and sf.action in (Action.RUN, Action.FAIL):
            sf.reasons = [*sf.reasons, f"after the decision at '{gate}'"]
        return sf

    def _step_body(self, step: CompiledStep) -> StepForecast:
        if step.for_each is None:
            el = self._element(step, -1, {})
            sf = StepForecast(
                step.id, step.uses, el.action, el.reasons, el.key, calls=el.calls, script=el.script
            )
            self._publish(step, sf, el)
            return sf
        try:
            items = ex.evaluate_value(step.for_each, self._ctx())
            bad = holds_unknown(items)
            if bad is not None:
                raise Touched(bad)
        except Touched as t:
            sf = StepForecast(
                step.id,
                step.uses,
                Action.UNKNOWN,
                [f"its elements depend on '{t.args[0]}', which would run first"],
            )
            self._publish(step, sf, None)
            return sf
        except RunnerError as exc:
            sf = StepForecast(step.id, step.uses, Action.RUN, [f"for_each: {_message(exc)}"])
            self._publish(step, sf, None)
            return sf
        if isinstance(items, dict):
            items = list(items.items())
        if not isinstance(items, list):
            sf = StepForecast(step.id, step.uses, Action.RUN, ["for_each does not give a list"])
            self._publish(step, sf, None)
            return sf
        if step.id in self.edited:  # an edit follows its item (state/overrides.py)
            self.present[step.id] = identities(items)
        elements = [self._element(step, i, {"item": it, "index": i}) for i, it in enumerate(items)]
        names = element_labels(step.label, items, self._ctx())
        for e in elements:
            e.label = names.get(e.index)
        action, reasons = summarise(elements)
        sf = StepForecast(
            step.id,
            step.uses,
            action,
            reasons,
            elements=elements,
            calls=[c for e in elements for c in e.calls],
        )
        self._publish(step, sf, None)
        return sf

    def _skip(self, step: CompiledStep, reason: str) -> StepForecast:
        sf = StepForecast(step.id, step.uses, Action.SKIP, [reason])
        self.interp.context_steps[step.id] = {"status": "skipped", "output": None}
        return sf

    def _when(self, step: CompiledStep) -> StepForecast | None:
        assert step.when is not None
        if not step.when.sync:
            return None  # decided by a command at apply time: plan the step as if it runs
        try:
            verdict = step.when.evaluate_sync(self._ctx(), root=self.plan.root)
        except Touched as t:
            sf = StepForecast(
                step.id,
                step.uses,
                Action.UNKNOWN,
                [f"when: depends on '{t.args[0]}', which would run first"],
            )
            self._publish(step, sf, None)
            return sf
        if verdict.passed:
            return None
        return self._skip(step, "when: " + "; ".join(verdict.reasons or ["is false"]))

    def _publish(self, step: CompiledStep, sf: StepForecast, el: ElementForecast | None) -> None:
        """Put the step's result in the expression context, as the interpreter would."""
        src = step.id
        if sf.elements is None:
            if el is None:
                self.interp.context_steps[src] = Unknown(src)
            else:
                output = self._output(step.id, el, src)
                self.interp.context_steps[src] = {"status": "cached", "output": output}
            return
        outputs: list[Any] = []
        entries = []
        for e in sf.elements:
            out = self._output(step.id, e, f"{src}[{e.index}]")
            outputs.append(out)
            entries.append({"index": e.index, "status": "cached", "output": out, "reason": None})
        self.interp.context_steps[src] = {
            "status": "cached",
            "output": outputs,
            "elements": entries,
        }

    def _output(self, sid: str, el: ElementForecast, src: str) -> Any:
        """The element's output as downstream expressions would see it after the apply."""
        if el.action in (Action.CACHED, Action.RESTORE):
            hit = self.cached.get((sid, el.key or ""))
            if hit is not None:
                return hit.output
        if (sid, el.index) in self.predicted:
            return self.predicted[(sid, el.index)]
        return Unknown(src)

    # -- one execution ----------------------------------------------------------------------

    def _element(self, step: CompiledStep, index: int, extra: dict[str, Any]) -> ElementForecast:
        try:
            args, parts = self.interp._resolve(step, extra)
            bad = holds_unknown(args)
            if bad is not None:
                raise Touched(bad)
        except Touched as t:
            refused = unknown_fails(step, self._ctx(**extra), self.interp.reuse)
            if refused is not None:
                return ElementForecast(index, Action.FAIL, [refused])
            el = ElementForecast(
                index,
                Action.UNKNOWN,
                [f"depends on '{t.args[0]}', which would run first"],
            )
            el.calls = self._calls(step, extra, None)
            self._pending(step, index, None)
            return el
        except StepFailure as exc:
            return ElementForecast(index, Action.RUN, [f"would fail: {exc.reason}"])
        except RunnerError as exc:
            return ElementForecast(index, Action.RUN, [f"would fail: {_message(exc)}"])
        key = parts.key()
        el = self._decide(step, index, extra, key, parts)
        script = args.get("script") if step.uses == "shell" else None
        if isinstance(script, dict) and el.action is Action.RUN:  # (what would run: shown)
            el.script = script.get("script")
        refused = rerun_fails(step, args, self.interp.reuse) if el.action is Action.RUN else None
        if refused is not None:
            return ElementForecast(index, Action.FAIL, [refused], key)
        if el.action is Action.RUN:
            el.calls = self._calls(step, extra, args)
            for call in el.calls:
                call.waiting = self.in_batch.get((step.id, index))
            self._pending(step, index, args)
            if step.type.predictable:
                self._predict(step, index, args)
        return el

    def _predict(self, step: CompiledStep, index: int, args: dict[str, Any]) -> None:
        """Compute a predictable step's output (read, template, card...): downstream keys can
        then be known, so an edit of one element names that element, not every one after it."""
        from ...steps.base import ResultStatus, StepContext

        ctx = StepContext(
            env=self.interp.env,
            run_id=self.interp.run_id,
            step_id=step.id,
            element=None if index < 0 else index,
        )
        coro = step.type.run(ctx, dict(args))
        try:
            coro.send(None)
        except StopIteration as stop:
            if stop.value.status is ResultStatus.OK:
                self.predicted[(step.id, index)] = stop.value.output
            return
        except Exception:
            return
        coro.close()  # it awaited something after all: its output stays unknown

    def _decide(
        self, step: CompiledStep, index: int, extra: dict[str, Any], key: str, parts: KeyParts
    ) -> ElementForecast:
        if step.id in self.edited:
            edited = self._override(step, index, extra, key, parts.identity())
            if isinstance(edited, ElementForecast):
                return edited
            if edited is not None:
                # the apply sets the edit aside, then answers as for any element (gatestep's
                # sibling, reuse.override): from the cache when the new key has a result
                fc = self._decide_unedited(step, index, extra, key, parts)
                fc.reasons = [edited, *fc.reasons]
                return fc
        return self._decide_unedited(step, index, extra, key, parts)

    def _decide_unedited(
        self, step: CompiledStep, index: int, extra: dict[str, Any], key: str, parts: KeyParts
    ) -> ElementForecast:
        if step.id in self.force:
            return ElementForecast(index, Action.RUN, ["forced (--force)"], key)
        if step.cache is CachePolicy.ALWAYS_RUN:
            return ElementForecast(index, Action.RUN, ["cache is off (cache: false)"], key)
        hit = self.cached.get((step.id, key))
        if hit is not None and hit.status == "partial":
            return ElementForecast(index, Action.RUN, ["last result was partial"], key)
        if hit is not None:
            if not self.interp.reuse.usable(hit):
                return ElementForecast(
                    index, Action.RUN, ["an output object is missing from the store"], key
                )
            drift = cached_outputs(step, hit.files, self.interp.reuse, self.hasher)
            if drift is not None:
                return ElementForecast(index, drift[0], drift[1], key)
            return ElementForecast(index, Action.CACHED, ["key matches a completed run"], key)
        why = self._why(step, index, key, parts)
        return ElementForecast(index, Action.RUN, [*self._began(step, key), *why], key)

    def _began(self, step: CompiledStep, key: str) -> list[str]:
        """A step not safe to repeat whose body began before and was never seen to end
        (engine/run/once.py): the apply fails it unless --retry-uncertain (or --force) says
        to run it, so the plan says which the apply would do."""
        if step.repeat_safe:
            return []
        from ..run import once

        if once.seen(once.mark_path(self.interp.state_dir, key)) is None:
            return []
        if self.interp.options.retry_uncertain:
            return ["began before and was never seen to end: runs again (--retry-uncertain)"]
        return [
            "began before and was never seen to end (repeat_safe: false): the apply would "
            f"fail it without running; --retry-uncertain or --force {step.id} runs it"
        ]

    def _why(self, step: CompiledStep, index: int, key: str, parts: KeyParts) -> list[str]:
        # The item's own history: another item's run is not this one's "before" (a new
        # video's steps never ran, whatever an older video's arguments were).
        last = last_keyed(
            self.journal, self.plan.name, step.id, index, item=self.interp.options.item
        )
        summary = parts.summary()
        value = summary.get("item")
        if value is None and last is None:
            return [self.history.removed(step.id) or "never ran"]
        old = None if last is None else loads(last.get("key_parts"))
        if value is not None and (old or {}).get("item") != value:
            # Elements are keyed by value: an element is compared with that value's own last
            # execution, not with whatever value held its index before (an insertion shifts
            # every later element); a value never seen is a new element.
            seen = self.history.by_value(step.id)
            last = seen.get(value)
            if last is None:
                # a gc after the step's newest kept execution may have taken this value's
                # result with it (which values it took is not recorded)
                newest = max((r["started_at"] or 0 for r in seen.values()), default=None)
                removed = self.history.removed(step.id, since=newest)
                if removed:
                    return [f"new element, or {removed}"]
                return ["new element" if seen else "never ran"]
            old = loads(last.get("key_parts"))
        assert last is not None
        if last["status"] in ("failed", "interrupted", "cancelled") and last["key"] == key:
            error = f": {last['error']}" if last["error"] else ""
            return [f"last attempt {last['status']}{error}"]
        if last["status"] == "awaiting_batch" and last["key"] == key:  # batch mode
            batch = in_batch(self.journal, last.get("report"))
            if batch is not None:  # paid for there: the apply collects it at no new cost
                self.in_batch[(step.id, index)] = batch
                return [f"in batch {batch} (waiting)"]
            return ["its call waits in a provider batch (an apply collects it)"]
        return changed_parts(old, summary) or ["input changed"]

    def _override(
        self, step: CompiledStep, index: int, extra: dict[str, Any], key: str, identity: str | None
    ) -> ElementForecast | str | None:
        """The forecast of an element a user edit answers (its own, or one set aside whose
        contract came back: reuse.override); the reason the active one is set aside (a str);
        or None without an edit that may answer it."""
        edits = overrides.standing(
            self.journal, self.plan.name, step.id, index, identity, self.present.get(step.id)
        )
        if not edits:
            return None
        try:
            contract = self.interp._contract(step, extra, key)
        except Touched as t:
            return ElementForecast(
                index,
                Action.UNKNOWN,
                [f"a user edit holds only if '{t.args[0]}' keeps its result"],
                key,
            )
        ov = overrides.holding(edits, contract)
        if ov is not None:
            self.cached[(step.id, key)] = CachedResult(
                key, ov.output, [], {}, "completed", "", None
            )
            back = "" if ov.status == "active" else " again (its contract is back)"
            return ElementForecast(index, Action.CACHED, [f"user edit #{ov.id} holds{back}"], key)
        gone = [e for e in edits if e.status == "active"]
        if gone:
            return f"user edit #{gone[0].id} would be set aside: its contract changed"
        return None

    def _pending(self, step: CompiledStep, index: int, args: Mapping[str, Any] | None) -> None:
        """Files this execution would write are not known until it runs."""
        files: set[str] = set()
        last = last_keyed(self.journal, self.plan.name, step.id, index)
        if last is not None:
            files.update(loads(last.get("files")) or {})
        if args is not None:
            with contextlib.suppress(Exception):
                files.update(step.type.produces(args))
        for rel in files:
            self.hasher.pending[str(self.plan.root / rel)] = step.id

    # -- gates ------------------------------------------------------------------------------

    def _gate(self, step: CompiledStep) -> StepForecast:
        try:
            _args, parts = self.interp._resolve(step, {})
            upstream = {d: self._upstream_key(d) for d in step.deps}
        except Touched as t:
            sf = StepForecast(
                step.id,
                step.uses,
                Action.ASK,
                [f"would ask for a decision once '{t.args[0]}' has run"],
            )
            self.interp.context_steps[step.id] = Unknown(step.id)
            return sf
        key = canonical_digest(
            {"args": parts.key(), "item": self.interp.options.item, "upstream": upstream}
        )
        reask = step.id in self.force or step.id in self.interp.options.reask
        old = None
        if not reask:
            old = gates.remembered(
                self.journal,
                pipeline=self.plan.name,
                gate=step.id,
                key=key,
                run_id=self.interp.run_id,
            )
        revised = [
            f"after the revision decided before (run {r.run_id})"
            for r in self.adopted.get(step.id, [])
        ]
        hit = self.cached.get((step.id, key))
        approved = old is None or old.decision is gates.Decision.APPROVE
        # as the apply (gatestep.asked_here): what the waiting run asked is newer than any
        # approval another run gave
        asked = gatestep.asked_here(self.journal, self.interp.run_id, step.id, key)
        if hit is not None and hit.status == "completed" and not reask and approved and not asked:
            self.interp.context_steps[step.id] = {"status": "cached", "output": hit.output}
            return StepForecast(
                step.id,
                step.uses,
                Action.CACHED,
                ["approved before with the same inputs", *revised[-1:]],
                key,
            )
        own = [
            *gates.decisions(self.journal, self.interp.run_id, step.id),
            *self.adopted.get(step.id, []),
        ]
        decided = [r for r in own if r.status is gates.RowStatus.DECIDED and r.key == key]
        here = self._decided_here(step, key, own, decided[-1]) if decided else None
        if here is not None:
            return here
        if own and own[-1].status is gates.RowStatus.PENDING and own[-1].key == key:
            # asked in the run the apply continues: it waits for that answer (gatestep.decide)
            self.interp.context_steps[step.id] = Unknown(step.id)
            return StepForecast(step.id, step.uses, Action.ASK, ["waiting for a decision"], key)
        if old is not None and old.decision is gates.Decision.APPROVE:
            # no result to answer from (the approval was recorded, never applied): the apply
            # takes it again (gatestep._recalled) and goes on past the gate
            self.interp.context_steps[step.id] = Unknown(step.id)
            why = f"approved before with the same inputs (by {old.by}, run {old.run_id})"
            return StepForecast(step.id, step.uses, Action.RUN, [why, *revised[-1:]], key)
        if old is not None and old.decision is gates.Decision.REJECT:
            self.rejected.add(step.id)
            self.interp.context_steps[step.id] = Unknown(step.id)
            why = (
                f"rejected before with the same inputs (by {old.by}, run {old.run_id}); "
                f"ask again with --reask {step.id}"
            )
            return StepForecast(step.id, step.uses, Action.CACHED, [why], key)
        if old is not None and old.decision is gates.Decision.REVISE:
            self.adopted.setdefault(step.id, []).append(old)
            again = self._decided_here(step, key, [*own, old], old)
            if again is not None:
                return again
        self.interp.context_steps[step.id] = Unknown(step.id)
        return StepForecast(step.id, step.uses, Action.ASK, ["would ask for a decision"], key)

    def _decided_here(
        self,
        step: CompiledStep,
        key: str,
        rows: list[gates.DecisionRow],
        row: gates.DecisionRow,
    ) -> StepForecast | None:
        """A decision on exactly these inputs in the run the apply continues (`decide
        --no-resume`) or taken from another run: the apply takes it (gatestep.decide) rather
        than asking; a revision sends its target round again with the review, as the apply's
        next pass does."""
        if row.decision is gates.Decision.APPROVE:
            self.interp.context_steps[step.id] = Unknown(step.id)
            why = f"approved by {row.by} (round {row.round}): would go on past the gate"
            return StepForecast(step.id, step.uses, Action.RUN, [why], key)
        if row.decision is gates.Decision.REJECT:
            self.rejected.add(step.id)
            self.interp.context_steps[step.id] = Unknown(step.id)
            why = f"rejected by {row.by} (round {row.round})"
            return StepForecast(step.id, step.uses, Action.CACHED, [why], key)
        target = gatestep.revise_target(step)
        if row.decision is not gates.Decision.REVISE or target is None:
            return None
        # as the apply's next pass: the review the target was made with, and this revision
        chain = [*self.review_rows.get(target, []), row]
        review = gates.review_for(chain)
        if review is None:
            return None
        self.review_rows[target] = chain
        self.interp.reviews[target] = review
        self.again = True
        why = f"revised by {row.by} (round {row.round}, run {row.run_id}): '{target}' again"
        return StepForecast(step.id, step.uses, Action.CACHED, [why], key)

    def _upstream_key(self, sid: str) -> Any:
        up = self.outcomes[sid]
        if up.action not in (Action.CACHED, Action.RESTORE):
            raise Touched(sid)
        return up.key or [e.key for e in up.elements or []]

    # -- provider calls ---------------------------------------------------------------------

    def _calls(
        self, step: CompiledStep, extra: dict[str, Any], args: Mapping[str, Any] | None
    ) -> list[Call]:
        if step.uses not in CALL_STEPS:
            return []
        arg = ArgReader(step, self._ctx(**extra), args)
        return provider_calls(step.uses, arg.get, self.interp.env.providers, args)


def _message(exc: RunnerError) -> str:
    return str(getattr(exc, "message", None) or exc)
