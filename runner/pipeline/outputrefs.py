"""Every read of a step's output checked against what its type declares, before anything runs.

``steps.poster.output.iteratons`` or a check's ``output.txt`` used to pass `validate` and
`check` and fail at run time, after paid calls (and their retries) were made. Each step type
declares its output's shape (steps/outputshape.py); here every expression of every step (its
arguments, ``for_each``, ``contract``, ``when`` and ``check`` rules) has each constant path it
reads walked along the shape of the step it names. A field that a closed object lacks is a
compile error at the expression's file:line:column with a did-you-mean. A for_each step's
output is the list of its elements' outputs; inside its own checks ``output`` is one element's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .. import expr as ex
from ..errors import InvalidPipeline
from ..steps.outputshape import ANY, Shape, list_of
from .loader import PipelineDoc, did_you_mean

if TYPE_CHECKING:
    from .compiler import CompiledStep


def check_output_reads(doc: PipelineDoc, steps: Mapping[str, CompiledStep]) -> None:
    """Raise InvalidPipeline at the first expression that reads an output field its step's
    type does not declare."""
    shapes: dict[str, Shape] = {}

    def element_shape(sid: str) -> Shape:
        found = shapes.get(sid)
        if found is None:
            raw = doc.data["steps"][sid].get("with") or {}
            try:
                found = steps[sid].type.output_shape(raw if isinstance(raw, dict) else {})
            except Exception:  # a plug-in's declaration that cannot be built declares nothing
                found = ANY
            shapes[sid] = found
        return found

    def output_of(sid: str) -> Shape:
        shape = element_shape(sid)
        return list_of(shape) if steps[sid].for_each is not None else shape

    for sid, step in steps.items():
        for e, own in _expressions(step):
            if not any(r.root == "output" or r.root == "steps" for r in e.refs):
                continue
            for path in e.paths:
                if path[0] == "steps" and len(path) > 2 and path[2] == "output":
                    target = path[1]
                    if target not in steps:
                        continue  # an unknown step is said by the reference check
                    shape, rest, shown = output_of(target), path[3:], f"steps.{target}.output"
                elif (
                    path[0] == "steps"
                    and len(path) > 4
                    and path[2] == "elements"
                    and isinstance(path[3], int)
                    and path[4] == "output"
                    and path[1] in steps
                ):
                    target = path[1]
                    shape, rest = element_shape(target), path[5:]
                    shown = f"steps.{target}.elements[{path[3]}].output"
                elif path[0] == "output" and own:
                    target, shape, rest, shown = sid, element_shape(sid), path[1:], "output"
                else:
                    continue
                _walk(e, sid, target, steps[target].for_each is not None, shape, rest, shown)


def _expressions(step: CompiledStep) -> Iterator[tuple[ex.Expression, bool]]:
    """Each expression of ``step``, with whether it may read the step's own ``output`` (a
    check's)."""
    for value in (step.args, step.for_each, step.contract):
        for e in ex.iter_expressions(value):
            yield e, False
    if step.when is not None:
        for e in step.when.expressions():
            yield e, False
    for rule in step.checks:
        for e in rule.expressions():
            yield e, True


def _walk(
    e: ex.Expression,
    sid: str,
    target: str,
    for_each: bool,
    shape: Shape,
    rest: tuple[Any, ...],
    shown: str,
) -> None:
    for part in rest:
        if shape.kind == "list":
            if isinstance(part, int):
                shape, shown = shape.item or ANY, f"{shown}[{part}]"
                continue
            item = shape.item or ANY
            if item.kind == "object" and item.closed and part in item.fields:
                why = f" (step '{target}' runs for_each)" if for_each and rest[0] == part else ""
                raise _error(
                    e,
                    sid,
                    f"{shown} is a list, so it has no field '{part}'{why}",
                    f"one element's: {shown}[0].{part}; every element's: "
                    f"{shown} | map(attribute='{part}') | list",
                )
            return
        if shape.kind != "object" or not shape.closed or not isinstance(part, str):
            return  # a mapping, a scalar's method or anything not declared: not refused
        if part not in shape.fields:
            names = sorted(shape.fields)
            raise _error(
                e,
                sid,
                f"{shown} has no field '{part}'"
                + ("" if shown != "output" else f" (the output of step '{target}')"),
                did_you_mean(part, names) or f"{shown} has: " + ", ".join(names),
            )
        shape, shown = shape.fields[part], f"{shown}.{part}"


def _error(e: ex.Expression, sid: str, message: str, hint: str) -> InvalidPipeline:
    return InvalidPipeline(
        f"in '${{{{ {e.source} }}}}': {message}", where=e.where, step=sid, hint=hint
    )
