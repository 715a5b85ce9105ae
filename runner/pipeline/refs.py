"""What a step's expressions and rules name: the steps they read, and an unknown name, param
or step as an error located where it is written (with a did-you-mean hint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import expr as ex
from ..errors import InvalidPipeline
from .loader import PipelineDoc, did_you_mean

if TYPE_CHECKING:  # rules load only for a pipeline that has some
    from ..expr.rules import Rule


def unknown_step(
    doc: PipelineDoc, sid: str, name: str, ids: set[str], base: tuple[Any, ...]
) -> InvalidPipeline:
    return InvalidPipeline(
        f"unknown step '{name}'",
        where=doc.where("steps", sid, *base),
        step=sid,
        hint=did_you_mean(name, ids) or "steps: " + ", ".join(sorted(ids)),
    )


def unknown_param(
    doc: PipelineDoc, sid: str | None, name: str, declared: set[str], base: tuple[Any, ...]
) -> InvalidPipeline:
    return InvalidPipeline(
        f"unknown param '{name}'",
        where=doc.where("steps", sid, *base) if sid else doc.where(*base),
        step=sid,
        hint=did_you_mean(name, declared)
        or (
            "declared params: " + ", ".join(sorted(declared))
            if declared
            else "the pipeline declares no params"
        ),
    )


def rule_refs(
    rule: Rule,
    doc: PipelineDoc,
    sid: str,
    base: tuple[Any, ...],
    names: tuple[str, ...],
    declared_params: set[str],
    step_ids: set[str],
) -> set[str]:
    """The steps a rule of step ``sid`` reads; an unknown name, param or step is an error
    located at the rule (``base`` under the step)."""
    found: set[str] = set()
    for r in rule.refs:
        root, attr = r.root, r.attr
        if root not in names:
            raise InvalidPipeline(
                f"unknown name '{root}' in expression",
                where=doc.where("steps", sid, *base),
                step=sid,
                hint=did_you_mean(root, names) or "names: " + ", ".join(names),
            )
        if attr is None:
            continue
        if root == "steps":
            if attr not in step_ids:
                raise unknown_step(doc, sid, attr, step_ids, base)
            found.add(attr)
        elif root == "params" and attr not in declared_params:
            raise unknown_param(doc, sid, attr, declared_params, base)
    return found


def check_refs(
    e: ex.Expression,
    doc: PipelineDoc,
    sid: str | None,
    declared_params: set[str],
    step_ids: set[str],
    *,
    allow: tuple[str, ...],
) -> set[str]:
    found: set[str] = set()
    for r in e.refs:
        if r.root not in allow:
            extra = " (only inside a for_each step)" if r.root in ("item", "index") else ""
            raise InvalidPipeline(
                f"unknown name '{r.root}' in '${{{{ {e.source} }}}}'{extra}",
                where=e.where,
                step=sid,
                hint=did_you_mean(r.root, allow) or "names: " + ", ".join(allow),
            )
        if r.root == "params" and r.attr is not None and r.attr not in declared_params:
            err = unknown_param(doc, sid, r.attr, declared_params, ())
            err.where = e.where
            raise err
        if r.root == "steps" and r.attr is not None:
            if r.attr not in step_ids:
                err = unknown_step(doc, sid or "", r.attr, step_ids, ())
                err.where = e.where
                raise err
            found.add(r.attr)
    return found
