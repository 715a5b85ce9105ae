"""Render a pipeline's prompts without calling a paid provider (``runner render``, pytest plugin).

A render is what a prompt-producing step would hand to a model: a template step's text, an llm
step's messages, a card step's block. The steps a render needs run on the ``fake`` provider with a
throwaway state directory, in a scratch copy of the pipeline's tree (steps that only read, such as
templates, read it in place), so neither the user's tree nor their ``.runner/`` is touched. llm
steps are never called: their render is built from their resolved arguments. Renders hold nothing
run-specific (the run id is fixed), so the same pipeline, params and files render byte-identically
in any process and with any state directory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import expr as ex
from ...errors import InvalidPipeline, RunnerError, UsageError
from ...expr.commandscope import scoped
from ...pipeline.compiler import CompiledStep, Plan, compile_document
from ...pipeline.labels import element_labels
from ...pipeline.loader import PipelineDoc, did_you_mean, load_document, resolve_params
from ...source.paths import inside
from ...state.canonical import canonical_json

if TYPE_CHECKING:
    from ...expr.rules import Rule

RUN_ID = "render"  # fixed so that `run.id` in a prompt renders the same everywhere

# Directories never copied into the scratch workspace: state, VCS, caches, environments.
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".runner",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        "__snapshots__",
    }
)


class RenderError(RunnerError):
    """A prompt could not be rendered (an upstream step failed, a template broke at run time)."""

    exit_code = 1


@dataclass(frozen=True)
class Render:
    """One prompt-producing step's render."""

    step: str
    kind: str  # the step type name: template, llm, card, ...
    text: str
    skipped: bool = False  # `when:` was false (or an upstream step was skipped)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "step": self.step,
            "kind": self.kind,
            "text": self.text,
            "sha256": self.sha256,
        }
        if self.skipped:
            doc["skipped"] = True
        return doc


@dataclass
class RenderResult:
    """The renders of one pipeline file for one fixture (None: the default params)."""

    pipeline: str
    file: Path
    fixture: str | None
    renders: list[Render] = field(default_factory=list)

    def texts(self) -> dict[str, str]:
        """step id -> rendered text, in pipeline order."""
        return {r.step: r.text for r in self.renders}

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "file": str(self.file),
            "fixture": self.fixture,
            "renders": [r.to_json() for r in self.renders],
            "exit_code": 0,
        }


def fixture_names(path: Path) -> list[str]:
    """The names of the ``tests:`` fixtures of a pipeline file (schema-checked on load).

    Raises InvalidPipeline.
    """
    return list((load_document(path).data.get("tests") or {}).keys())


def is_prompt_step(step: CompiledStep) -> bool:
    """True for the steps ``runner render`` shows: prompt producers and card builders."""
    return bool(step.type.produces_prompt) or step.type.name in _RENDERERS


def render_pipeline(
    path: Path,
    *,
    fixture: str | None = None,
    params: Mapping[str, Any] | None = None,
    overrides: Mapping[str, str] | None = None,
    steps: Sequence[str] | None = None,
    state_dir: Path | None = None,
) -> RenderResult:
    """Render the prompts of the pipeline at ``path``.

    ``fixture`` names a ``tests:`` entry whose params and files apply; ``params`` (typed values)
    and then ``overrides`` (raw ``-p`` strings) are applied over it. ``steps`` limits the
    renders to those step ids (default: the fixture's ``steps:``, else every prompt step).
    ``state_dir`` is the scratch state directory to use (default: a temporary one).

    Raises InvalidPipeline (located) for a bad pipeline or fixture, UsageError for an unknown
    fixture, step or param, RenderError when a step the renders need fails.
    """
    doc = load_document(path)
    spec = _fixture_spec(doc, fixture)
    values = resolve_params(doc, _merged_overrides(doc, fixture, spec, params, overrides))
    files: dict[str, str] = dict(spec.get("files") or {})
    with tempfile.TemporaryDirectory(prefix="runner-render-") as tmp:
        scratch = Path(tmp)
        workdoc = _copy_tree(doc, fixture, files, scratch, state_dir) if files else doc
        plan = compile_document(workdoc, values, registry=_registry())
        wanted = _wanted_steps(doc, plan, fixture, spec, steps)
        if workdoc is doc and _may_write(plan, wanted):
            workdoc = _copy_tree(doc, fixture, files, scratch, state_dir)
            plan = compile_document(workdoc, values, registry=_registry())
        renders = _render(plan, wanted, state_dir or scratch / "state")
    return RenderResult(pipeline=plan.name, file=path, fixture=fixture, renders=renders)


# -- fixtures and params ------------------------------------------------------------------------


def _fixture_spec(doc: PipelineDoc, fixture: str | None) -> dict[str, Any]:
    tests: dict[str, Any] = doc.data.get("tests") or {}
    if fixture is None:
        return {}
    if fixture not in tests:
        hint = did_you_mean(fixture, tests) or (
            "fixtures: " + ", ".join(tests) if tests else "the pipeline has no `tests:`"
        )
        raise UsageError(f"unknown fixture '{fixture}'", hint=hint)
    return dict(tests[fixture] or {})


def _merged_overrides(
    doc: PipelineDoc,
    fixture: str | None,
    spec: Mapping[str, Any],
    params: Mapping[str, Any] | None,
    overrides: Mapping[str, str] | None,
) -> dict[str, str]:
    declared = doc.data.get("params") or {}
    merged: dict[str, str] = {}
    for key, value in (spec.get("params") or {}).items():
        if key not in declared:
            raise InvalidPipeline(
                f"fixture '{fixture}' sets unknown param '{key}'",
                where=doc.where("tests", fixture, "params", key, key=True),
                hint=did_you_mean(key, declared) or "declared params: " + ", ".join(declared),
            )
        merged[key] = _as_override(value)
    for key, value in (params or {}).items():
        merged[key] = _as_override(value)
    merged.update(overrides or {})
    return merged


def _as_override(value: Any) -> str:
    # JSON is YAML, so the loader parses it back to the same typed value and checks its type.
    return json.dumps(value, ensure_ascii=False)


def _wanted_steps(
    doc: PipelineDoc,
    plan: Plan,
    fixture: str | None,
    spec: Mapping[str, Any],
    steps: Sequence[str] | None,
) -> list[str]:
    prompt_ids = [sid for sid in plan.order if is_prompt_step(plan.steps[sid])]
    if steps:
        chosen, where = list(steps), None
    elif spec.get("steps"):
        chosen, where = list(spec["steps"]), ("tests", fixture, "steps")
    else:
        return prompt_ids
    for i, sid in enumerate(chosen):
        problem = None
        if sid not in plan.steps:
            problem = f"unknown step '{sid}'"
        elif sid not in prompt_ids and plan.steps[sid].uses != "shell":  # a shell step: asked
            problem = f"step '{sid}' ({plan.steps[sid].uses}) does not produce a prompt"
        if problem is not None:
            hint = did_you_mean(sid, prompt_ids) or "prompt steps: " + ", ".join(prompt_ids)
            if where is None:
                raise UsageError(f"--step: {problem}", hint=hint)
            raise InvalidPipeline(problem, where=doc.where(*where, i), hint=hint)
    keep = set(chosen)
    return [sid for sid in plan.order if sid in keep]


def _registry() -> Any:
    from ...steps.registry import default_registry

    return default_registry()


# -- the scratch workspace ----------------------------------------------------------------------


def _may_write(plan: Plan, wanted: Sequence[str]) -> bool:
    """Whether a step the renders run may write into the workspace (then it runs in a copy)."""
    run = _ancestors(plan, wanted) | set(wanted)
    return any(
        plan.steps[sid].type.name not in _READ_ONLY
        or any(_runs_commands(r) for r in [plan.steps[sid].when, *plan.steps[sid].checks])
        for sid in run
    )


def _runs_commands(rule: Rule | None) -> bool:
    """Whether a rule (or a part of it) is an `exec` check: a shell command may write."""
    if rule is None:
        return False
    return rule.kind == "exec" or any(_runs_commands(c) for c in rule.children())


def _copy_tree(
    doc: PipelineDoc,
    fixture: str | None,
    files: Mapping[str, str],
    scratch: Path,
    state_dir: Path | None,
) -> PipelineDoc:
    """Copy the pipeline's tree into ``scratch`` and write the fixture's files there.

    Returns a PipelineDoc that reads like the original (same source, so errors name the user's
    file) but lives in the copy.
    """
    pipeline = doc.path.resolve()
    root = (pipeline.parent / str(doc.data.get("root", "."))).resolve()
    base = Path(os.path.commonpath([pipeline.parent, root]))
    work = scratch / "work"
    state = state_dir.resolve() if state_dir is not None else None
    shutil.copytree(base, work, ignore=_ignore(state), symlinks=True)
    work_root = work / root.relative_to(base)
    for rel, text in files.items():
        where = doc.where("tests", fixture, "files", rel, key=True)
        target = work_root / inside(root, rel, where=where).relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return PipelineDoc(work / pipeline.relative_to(base), doc.src, doc.data)


def _ignore(state: Path | None) -> Callable[[str, list[str]], set[str]]:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n in _SKIP_DIRS}
        if state is not None:
            skip |= {n for n in names if Path(directory, n).resolve() == state}
        return skip

    return ignore


# -- running what the renders need --------------------------------------------------------------


class _FakeProviders:
    """Every provider name resolves to a `fake` provider: rendering never pays for a call.

    A provider the project's runner.toml configures with type `fake` (e.g. with scripted
    replies) is used as configured; any other name gets the project's `fake`.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._access: Any = None

    def get(self, name: str | None) -> Any:
        if self._access is None:
            from ...providers.config import load_access

            self._access = load_access(self.root)
        sections = self._access.config.providers
        if name and sections.get(name, {}).get("type", name) == "fake":
            return self._access.get(name)
        if sections.get("fake", {}).get("type", "fake") != "fake":
            from ...providers.registry import create

            return create("fake")  # a project that named another provider "fake"
        return self._access.get("fake")

    def default_name(self) -> str:
        return "fake"


def _render(plan: Plan, wanted: list[str], state_dir: Path) -> list[Render]:
    from ..run.apply import State, resolve_item
    from ..run.interpreter import Interpreter
    from ..run.options import ApplyOptions
    from ..run.outcomes import StepStatus

    called = {sid for sid in wanted if plan.steps[sid].type.name in _UNCALLED}
    needed = _ancestors(plan, wanted) | (set(wanted) - called)
    sub = dataclasses.replace(
        plan,
        steps={sid: plan.steps[sid] for sid in plan.order if sid in needed},
        order=[sid for sid in plan.order if sid in needed],
    )
    item = resolve_item(plan, None)
    state = State.open(state_dir)
    try:
        # A reused --state already holds the fixed run id: continue that run, do not insert it.
        again = bool(state.journal.query("SELECT id FROM runs WHERE id=?", (RUN_ID,)))
        options = ApplyOptions(run_id=RUN_ID, item=item, resume_run_id=RUN_ID if again else None)
        interp = Interpreter(
            sub,
            journal=state.journal,
            objects=state.objects,
            state_dir=state.dir,
            options=options,
            providers=_FakeProviders(plan.root),
        )
        report = asyncio.run(interp.apply()) if sub.order else None
    finally:
        state.close()
    outcomes = {o.id: o for o in report.steps} if report is not None else {}
    for sid in sub.order:
        o = outcomes[sid]
        if o.status is StepStatus.FAILED:
            raise RenderError(
                f"step failed while rendering: {o.reason}", step=sid, where=plan.steps[sid].where
            )
        if o.status is StepStatus.AWAITING_HUMAN:
            raise RenderError(
                "waits for a human decision; a render cannot pass it",
                step=sid,
                where=plan.steps[sid].where,
                hint="render the steps before the gate with --step",
            )
    context: dict[str, Any] = {
        "params": plan.params,
        "steps": interp.context_steps if sub.order else {},
        "run": {"id": RUN_ID, "item": item},
        "feedback": [],
        "attempt": 1,
    }
    out: list[Render] = []
    for sid in wanted:
        step = plan.steps[sid]
        if sid in called:
            out.append(_render_uncalled(plan, step, context))
            continue
        o = outcomes[sid]
        if o.status is StepStatus.SKIPPED:
            out.append(Render(sid, step.type.name, f"(skipped: {o.reason})\n", skipped=True))
            continue
        out.append(Render(sid, step.type.name, _text_of(step, o.output, context)))
    return out


def _ancestors(plan: Plan, ids: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    todo = [d for sid in ids for d in plan.steps[sid].deps]
    while todo:
        sid = todo.pop()
        if sid not in seen:
            seen.add(sid)
            todo.extend(plan.steps[sid].deps)
    return seen


# -- turning outputs and arguments into text ----------------------------------------------------


def _text_of(step: CompiledStep, output: Any, context: Mapping[str, Any]) -> str:
    render = _RENDERERS.get(step.type.name, _output_text)
    if step.for_each is not None and isinstance(output, list):
        try:
            items = ex.evaluate_value(step.for_each, dict(context))
        except RunnerError:
            items = None
        items = list(items.items()) if isinstance(items, dict) else items
        labels = element_labels(step.label, items, dict(context)) if isinstance(items, list) else {}
        return _elements([render(o) for o in output], labels)
    return render(output)


def _elements(texts: list[str], labels: Mapping[int, str]) -> str:
    return "".join(
        f"=== [{i}{' ' + labels[i] if i in labels else ''}] ===\n{_with_newline(t)}"
        for i, t in enumerate(texts)
    )


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _output_text(output: Any) -> str:
    if isinstance(output, Mapping) and isinstance(output.get("text"), str):
        return str(output["text"])
    return canonical_json(output) + "\n"


def _card_text(output: Any) -> str:
    from ...steps.cards import card_block

    return card_block(output)


def _render_uncalled(plan: Plan, step: CompiledStep, context: dict[str, Any]) -> Render:
    """An llm step's render: the messages it would send, from its resolved arguments; a shell
    step's: the script it would run and the values its environment would hold."""
    if step.type.name == "shell":

        def text(ctx: Mapping[str, Any]) -> str:
            return _script_text(step.type.evaluate(step.args, ctx))
    else:

        def text(ctx: Mapping[str, Any]) -> str:
            return _messages_text(ex.evaluate_value(step.args, ctx))

    for d in step.deps:
        status = context["steps"].get(d, {}).get("status")
        if status == "skipped" and step.on_skipped != "run":
            return Render(
                step.id, step.type.name, f"(skipped: upstream '{d}' was skipped)\n", skipped=True
            )
    try:
        if step.when is not None:
            with scoped(step.sandbox, step.network):
                verdict = asyncio.run(step.when.evaluate(context, root=plan.root))
            if not verdict.passed:
                reasons = "; ".join(verdict.reasons)
                reason = f"when: {reasons}" if reasons else "when is false"
                return Render(step.id, step.type.name, f"(skipped: {reason})\n", skipped=True)
        if step.for_each is None:
            return Render(step.id, step.type.name, text(context))
        items = ex.evaluate_value(step.for_each, context)
        if isinstance(items, dict):
            items = list(items.items())
        if not isinstance(items, list):
            raise RenderError(f"for_each must give a list, found {type(items).__name__}")
        texts = [text({**context, "item": it, "index": i}) for i, it in enumerate(items)]
        labels = element_labels(step.label, items, dict(context))
        return Render(step.id, step.type.name, _elements(texts, labels))
    except RunnerError as exc:
        if exc.step is None:
            exc.step = step.id
        raise


def _script_text(args: Mapping[str, Any]) -> str:
    """A shell step's command as /bin/sh runs it, each value's variable beside it (one line
    each, as JSON: a value's newlines and escapes stay visible)."""
    script = args.get("script") or {"script": args.get("run", ""), "values": {}}
    lines = [_with_newline(script["script"])]
    if script["values"]:
        lines.append("-- its environment holds --\n")
        for name, value in script["values"].items():
            lines.append(f"{name}={json.dumps(value, ensure_ascii=False)}\n")
    return "".join(lines)


def _messages_text(args: Mapping[str, Any]) -> str:
    """The chat an llm step sends, as text (same message order as runner.steps.llm)."""
    messages: list[dict[str, Any]] = []
    if args.get("system"):
        messages.append({"role": "system", "content": str(args["system"])})
    for m in args.get("messages") or []:
        messages.append(
            {
                "role": str(m["role"]),
                "content": str(m.get("content", "")),
                "images": [str(i) for i in m.get("images") or []],
            }
        )
    if "prompt" in args:
        messages.append({"role": "user", "content": str(args["prompt"])})
    parts = []
    for m in messages:
        block = f"--- {m['role']} ---\n{_with_newline(m['content'])}"
        for image in m.get("images") or []:
            block += f"[image: {image}]\n"
        parts.append(block)
    schema = args.get("schema")
    if schema is not None:
        parts.append("--- reply schema ---\n" + json.dumps(schema, indent=2, sort_keys=True) + "\n")
    elif args.get("format") == "json":
        parts.append("--- reply format: json ---\n")
    return "".join(parts)


# Step types whose render is not their output text; and those never run (they would pay).
_RENDERERS: dict[str, Callable[[Any], str]] = {"card": _card_text}
_UNCALLED = frozenset({"llm", "shell"})  # shell: only when asked for by --step
# Step types that only read the workspace: renders needing nothing else run without a copy.
_READ_ONLY = frozenset({"template", "card", "verify_card", "hash", "read", "llm"})
