"""`template`: render a Jinja2 template (a file or inline text) in the sandbox."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from .. import expr as ex
from ..errors import InvalidPipeline, Location, TemplateError
from ..source.beneath import read_beneath
from ..source.document import decode_utf8
from ..source.paths import inside
from ..source.regularfile import not_regular, open_regular, read_regular
from .base import StepContext, StepResult, StepType, invalid


def template_filters() -> dict[str, Callable[..., Any]]:
    """Filters every template gets; step families add theirs here (one line each)."""
    filters: dict[str, Callable[..., Any]] = {}
    if importlib.util.find_spec("runner.steps.cards") is not None:  # not in every build
        filters["card_block"] = card_block
    return filters


def card_block(
    value: Mapping[str, Any], title: str | None = None, schema_version: int | None = None
) -> str:
    """runner.steps.cards.card_block, imported on first use (cards load jsonschema: ~0.1 s)."""
    from .cards import card_block as build_block

    return build_block(value, title, schema_version)


_ENVS: dict[Path, ex.HardenedEnvironment] = {}


def environment_for(root: Path) -> ex.HardenedEnvironment:
    env = _ENVS.get(root)
    if env is None:
        env = _ENVS[root] = ex.template_environment(root, template_filters())
    return env


class TemplateStep(StepType):
    name = "template"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
    # 2: the key names the files a render read (recorded reads); a result keyed by version 1
    # named only those a parse predicted, and is not taken for one
    version = "2"
    description = "Render a Jinja2 template file or inline text with `vars`, sandboxed."
    produces_prompt = True
    predictable: ClassVar[bool] = True  # runner plan computes it to see past it
    records_reads: ClassVar[bool] = True
    output_doc: ClassVar[dict[str, str]] = {
        "text": "string: the rendered text",
        "sha256": "string: its sha256",
        "template_sha256": "string: the template file's sha256 (with `template:`)",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "oneOf": [{"required": ["template"]}, {"required": ["text"]}],
        "properties": {
            "template": {
                "type": "string",
                "description": "Template file, relative to the pipeline.",
            },
            "text": {"type": "string", "description": "Inline template text."},
            "vars": {
                "type": "object",
                "description": "Variables the template sees (and only these).",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        name = args.get("template")
        text = args.get("text")
        env = environment_for(root)
        label: str
        if isinstance(name, str) and "${{" not in name:
            path = inside(root, name, where=where)
            what = not_regular(path)
            if what is not None:
                raise invalid(f"template {name} is {what}, not a regular file", where)
            if not path.is_file():
                raise invalid(f"template file not found: {name}", where)
            label = name
            try:
                needed = _needed_variables(env, str(path), name)
            except InvalidPipeline:
                raise  # bytes that are not UTF-8, at their line and column
            except Exception as exc:
                lineno = getattr(exc, "lineno", 0) or 0
                msg = getattr(exc, "message", None) or str(exc)
                raise TemplateError(
                    f"template syntax error: {msg}", where=Location(name, lineno, 1)
                ) from None
        elif isinstance(text, str) and "${{" not in text:
            label = "text"
            try:
                needed = frozenset(ex.template_variables(env, text))
            except Exception as exc:
                msg = getattr(exc, "message", None) or str(exc)
                raise TemplateError(f"inline template syntax error: {msg}", where=where) from None
        else:
            return
        variables = args.get("vars") if "vars" in args else {}
        if isinstance(variables, dict):
            missing = needed - set(variables) - {"feedback", "attempt"}
            if missing:
                raise TemplateError(
                    f"template {label} uses {', '.join(sorted(missing))} "
                    "but `vars:` does not give " + ("it" if len(missing) == 1 else "them"),
                    where=where,
                )

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        name = args.get("template")
        if not name:
            return []
        inside(root, name)
        out = [name]
        # Templates it includes or extends are part of the key too.
        out.extend(_referenced(environment_for(root), root, name, set()))
        return out

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        from ..expr.templates import recording_reads  # jinja2 loads when a template renders

        variables = dict(args.get("vars") or {})
        variables.setdefault("feedback", ctx.feedback)
        variables.setdefault("attempt", ctx.attempt)
        # Every file the render opens, by a constant name or a computed one: the key names
        # them (a static parse sees only `{% include "x.j2" %}`, not `"parts/" ~ tone`).
        with recording_reads() as reads:
            text = ex.render_template(
                environment_for(ctx.root),
                name=args.get("template"),
                text=args.get("text"),
                variables=variables,
            )
        output = {"text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
        if args.get("template"):
            # The template's own content hash: the "template spec" part of idempotency keys.
            source = read_beneath(ctx.root, args["template"])  # as opened now
            output["template_sha256"] = hashlib.sha256(source).hexdigest()
        return StepResult(output=output, reads=dict(reads))


_NEEDED: dict[tuple[str, int, int, int, int], frozenset[str]] = {}


def _needed_variables(env: ex.HardenedEnvironment, path: str, name: str) -> frozenset[str]:
    """Variables a template file reads; parsed once per file version (many steps share one).
    Raises InvalidPipeline (not UTF-8, located) or jinja2.TemplateSyntaxError."""
    st = os.stat(path)
    # by the whole signature: an mtime set back after a same-size rewrite is no proof
    sig = (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    found = _NEEDED.get(sig)
    if found is None:
        with open_regular(path) as f:  # a FIFO is refused, not waited on
            text = decode_utf8(f.read(), name)
        found = _NEEDED[sig] = frozenset(ex.template_variables(env, text))
    return found


def _referenced(env: ex.HardenedEnvironment, root: Path, name: str, seen: set[str]) -> list[str]:
    if name in seen:
        return []
    seen.add(name)
    names = _includes(env, root / name)
    if names is None:
        return []
    out = []
    for n in names:
        inside(root, n)
        out.append(n)
        out.extend(_referenced(env, root, n, seen))
    return out


_INCLUDES: dict[tuple[str, int, int, int, int], tuple[str, ...]] = {}


def _includes(env: ex.HardenedEnvironment, path: Path) -> tuple[str, ...] | None:
    """Templates a template file includes or extends by constant name; parsed once per file
    version (every step of a pipeline computes its reads). None when it cannot be read or
    parsed."""
    from jinja2 import meta

    try:
        st = os.stat(path)
        sig = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        found = _INCLUDES.get(sig)
        if found is None:
            source = read_regular(path).decode("utf-8")
            found = tuple(n for n in meta.find_referenced_templates(env.parse(source)) if n)
            _INCLUDES[sig] = found
    except Exception:
        return None
    return found
