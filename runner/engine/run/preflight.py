"""Checks made before the first step runs, so a person is never asked about work that would fail.

Every argument that depends on the run's params alone (not on another step's output or a
for_each element) is known before anything runs. These checks look at exactly those values:

- template steps render (a missing template variable is an error now, not after a model call);
- llm and image steps name a provider that exists, is configured, can do the kind of work
  asked, and has its API key in the environment; it carries every setting the step asks for
  (honoured.py); an image step's size is one its provider (and model) accepts;
- ingest steps name a valid collection (and an existing one when they may not create it);
- declared output paths stay inside the pipeline's root and are not folders.

A failure raises InvalidPipeline (exit 2) at the step's file:line:column; nothing is journaled.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from ... import expr as ex
from ...errors import InvalidPipeline, RunnerError

if TYPE_CHECKING:
    from ...source.paths import InsideRoot

KNOWN_ROOTS = frozenset({"params"})
# A plan without any of these has nothing costly to protect and no one to ask: checking it
# would only slow the edit-apply loop of template-only pipelines.
WORTH_IT = frozenset({"llm", "image", "human_gate", "ingest", "shell"})
_UNKNOWN = object()


def known_args(
    step: Any, params: Mapping[str, Any], only: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The step's top-level arguments whose value depends on params only, evaluated (of
    ``only``, when given)."""
    args = step.args if isinstance(step.args, dict) else {}
    out: dict[str, Any] = {}
    for key, value in args.items():
        if only is not None and key not in only:
            continue
        if type(value) is list and all(type(v) is str for v in value):
            # Plain text throughout (how a list without ``${{ }}`` compiles): its value as
            # written; evaluating it was a third of checking 1,000 shell steps' outputs.
            out[key] = list(value)
            continue
        if any(r.root not in KNOWN_ROOTS for e in ex.iter_expressions(value) for r in e.refs):
            continue
        try:
            out[key] = ex.evaluate_value(value, {"params": params})
        except RunnerError:
            continue  # the step reports its own expression errors when it runs
    return out


def check_plan(
    plan: Any,
    *,
    state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    keys: bool = True,
    outputs_found: Collection[str] = frozenset(),
) -> None:
    """Raise InvalidPipeline for the first thing that cannot work; see the module docstring.
    ``keys`` False: an API key missing from the environment is not one of them.
    ``outputs_found``: shell steps whose every output ``shell_outputs`` names the caller has
    just found as a regular file below the root, each of its directories one too (no part a
    symlink): their check would pass, so it is not made (watch's reused steps, whose check
    of their outputs found that: surfaces/watchreuse.py)."""
    if not any(s.uses in WORTH_IT for s in plan.steps.values()):
        return
    from ...source.paths import InsideRoot

    env = os.environ if environ is None else environ
    providers: Any = None
    folders = _Folders()
    inside = InsideRoot(plan.root)
    for sid in plan.order:
        step = plan.steps[sid]
        check = _CHECKS.get(step.uses)
        if check is None or (sid in outputs_found and step.uses == "shell"):
            continue
        args = known_args(step, plan.params, _READS.get(step.uses))
        if not args:
            continue
        try:
            if step.uses in ("llm", "image"):
                if providers is None:
                    from ...providers.config import load_access

                    providers = load_access(plan.root, environ=env)
                where = _arg_where(plan, sid, "provider")
                _provider(plan, step, args, providers, None if keys is False else env, where)
            elif step.uses == "shell":
                _outputs(step, args, folders, inside)
            else:
                check(plan, step, args, state_dir)
        except RunnerError as exc:
            if isinstance(exc, InvalidPipeline) and exc.where is not None:
                raise
            raise InvalidPipeline(exc.message, where=step.where, step=sid, hint=exc.hint) from None


def _template(plan: Any, step: Any, args: dict[str, Any], state_dir: Path | None) -> None:
    declared = step.args if isinstance(step.args, dict) else {}
    if "vars" not in declared or "vars" not in args:
        return  # no variables to miss, or they come from another step (known once it ran)
    if "template" not in args and "text" not in args:
        return
    from ...steps.template import environment_for

    ex.render_template(
        environment_for(plan.root),
        name=args.get("template"),
        text=args.get("text"),
        variables=dict(args.get("vars") or {}),
    )


def _arg_where(plan: Any, sid: str, arg: str) -> Any:
    """The file:line:column of the value the step's ``with:`` gives ``arg``, or None."""
    step = (plan.doc.data.get("steps") or {}).get(sid)
    given = step.get("with") if isinstance(step, dict) else None
    if not (isinstance(given, dict) and arg in given):
        return None
    return plan.doc.where("steps", sid, "with", arg)


def _provider(
    plan: Any,
    step: Any,
    args: dict[str, Any],
    providers: Any,
    env: Mapping[str, str] | None,
    where: Any = None,
) -> None:
    """``env`` None: the keys in the environment are not checked (`runner check`, which may
    run where the secrets are not)."""
    if "provider" not in args and "provider" in (step.args if isinstance(step.args, dict) else {}):
        return  # chosen by an upstream output
    named = args.get("provider")
    name = named or providers.default_name()  # none named: runner.toml's default_provider
    _known_provider(step, name, providers, where, default=not named)
    provider = providers.get(name)
    kind = "image" if step.uses == "image" else "text"
    caps = provider.capabilities
    kinds = sorted(getattr(caps, "kinds", None) or ())
    if kinds and kind not in kinds:
        _fail(step, f"provider '{name}' does not make {kind} (it makes: {', '.join(kinds)})")
    settings = getattr(provider, "settings", {}) or {}
    var = settings.get("api_key_env")
    base = str(settings.get("base_url") or "")
    host = (urlsplit(base).hostname or "") if base else ""
    local = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    if env is not None and isinstance(var, str) and var and not env.get(var) and not local:
        _fail(
            step,
            f"provider '{name}' needs an API key in the environment variable {var}",
            f"export {var}=... or run on another provider (e.g. -p provider=fake)",
        )
    from .honoured import check_honoured

    check_honoured(plan, step, args, provider, name, kind)
    if kind == "image" and "size" in args:
        _image_size(step, args, provider, name)


def _known_provider(step: Any, name: str, providers: Any, where: Any, *, default: bool) -> None:
    """An unknown name fails at the `provider:` value (else the step), with the nearest known
    name: a typo is the usual cause, and the registry's error knew neither."""
    from ...providers.registry import BUILTINS, names

    configured = [n for n in providers.config.providers if isinstance(n, str)]
    if name in configured or name in BUILTINS:
        return
    installed = names()  # plugins too: their entry points are read only here
    if name in installed:
        return
    import difflib

    known = [*configured, *(n for n in installed if n not in configured)]
    # closer than the loader's 0.6: provider names are short, and 'nope' is not 'openai'
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.75)
    guess = f"did you mean '{close[0]}'?" if close else None
    listed = f"installed: {', '.join(installed)}"
    if configured:
        listed = f"configured in runner.toml: {', '.join(configured)}; {listed}"
    whose = " (runner.toml's default_provider)" if default else ""
    raise InvalidPipeline(
        f"unknown provider '{name}'{whose}",
        where=step.where if default or where is None else where,
        step=step.id,
        hint=f"{guess} ({listed})" if guess else f"providers {listed}",
    )


def _image_size(step: Any, args: dict[str, Any], provider: Any, name: str) -> None:
    from ...steps.image import parse_size

    try:
        size = parse_size(args["size"])
    except ValueError as exc:
        _fail(step, str(exc))
    params = args.get("params") if isinstance(args.get("params"), dict) else {}
    refused = provider.size_refused(size, params)
    if refused is not None:
        why, accepted = refused
        _fail(
            step,
            f"provider '{name}' does not make {size[0]}x{size[1]} images: {why}",
            f"sizes it accepts: {accepted}" if accepted else None,
        )


def _ingest(plan: Any, step: Any, args: dict[str, Any], state_dir: Path | None) -> None:
    name = args.get("collection")
    if not isinstance(name, str):
        return
    from ...state.collections import Collections, check_name

    check_name(name)
    if args.get("create", _UNKNOWN) is False and state_dir is not None:
        known: set[str] = set()
        if (state_dir / "collections.db").is_file():  # a check never creates the database
            with Collections(state_dir) as cols:
                known = {r["name"] for r in cols.names_and_counts()}
        if name not in known:
            _fail(
                step,
                f"unknown collection '{name}' (the step may not create it)",
                f"collections: {', '.join(sorted(known)) or 'none'} (or set create: true)",
            )


def shell_outputs(step: Any, params: Mapping[str, Any]) -> list[str]:
    """The output paths check_plan looks at for a shell ``step``: those known from params."""
    return _checked_outputs(known_args(step, params, _READS["shell"]))


def _checked_outputs(args: dict[str, Any]) -> list[str]:
    outputs = args.get("outputs")
    if not isinstance(outputs, list):
        return []
    return [rel for rel in outputs if isinstance(rel, str)]


def _outputs(step: Any, args: dict[str, Any], folders: _Folders, inside: InsideRoot) -> None:
    for rel in _checked_outputs(args):
        if folders.is_folder(inside.text(rel, where=step.where)):
            _fail(step, f"output '{rel}' is a folder; outputs name files")


class _Folders:
    """Whether a path is a folder: a stat, or for a directory many outputs are in (a fan-out's
    every output) one listing of the folders in it."""

    LIST_AFTER = 16

    def __init__(self) -> None:
        self._asked: dict[str, int] = {}
        self._listed: dict[str, frozenset[str] | None] = {}

    def is_folder(self, path: str) -> bool:
        directory, name = os.path.split(path)
        if directory not in self._listed:
            asked = self._asked[directory] = self._asked.get(directory, 0) + 1
            if asked < self.LIST_AFTER:
                return os.path.isdir(path)
            self._listed[directory] = _folders_in(directory)
        folders = self._listed[directory]
        return os.path.isdir(path) if folders is None else name in folders


def _folders_in(directory: str) -> frozenset[str] | None:
    try:
        with os.scandir(directory) as entries:
            return frozenset(e.name for e in entries if e.is_dir())  # (a link to one counts)
    except FileNotFoundError:
        return frozenset()
    except OSError:
        return None


def _fail(step: Any, message: str, hint: str | None = None) -> NoReturn:
    """Every check fails the same way: at the step's file:line:column, naming the step."""
    raise InvalidPipeline(message, where=step.where, step=step.id, hint=hint)


_CHECKS: dict[str, Any] = {
    "template": _template,
    "llm": _provider,
    "image": _provider,
    "ingest": _ingest,
    "shell": _outputs,  # (given the run's folder listings, not the state dir)
}
# The arguments a check reads (None: all of them): a shell step's command is not evaluated.
_READS: dict[str, tuple[str, ...] | None] = {"shell": ("outputs",)}


def check_out_dir(plan: Any, out_dir: str | None) -> None:
    """`apply --out DIR`, before the first step: the pipeline makes images for it to receive,
    and DIR is (or can be made) a writable folder. Raises UsageError (exit 2)."""
    from ...errors import UsageError

    if not out_dir:
        return
    if not any(s.uses == "image" for s in plan.steps.values()):
        raise UsageError(
            f"--out {out_dir}: pipeline {plan.name} has no image step, so nothing would be copied"
        )
    path = Path(out_dir).absolute()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        what = "is a file" if existing == path else f"cannot be made: {existing} is a file"
        raise UsageError(f"--out {out_dir} {what}; it names the folder finals are copied to")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" (in {existing})"
        raise UsageError(f"--out {out_dir}: no permission to write there{where}")
