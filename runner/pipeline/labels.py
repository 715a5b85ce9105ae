"""What a for_each element is called: its `label:` when the step has one, else its item when that
is a short scalar (a city's name says more than `#37`), else its index."""

from __future__ import annotations

from typing import Any

MAX_LABEL = 40  # longer text is clipped: a label names an element, it does not show it


def default_label(item: Any) -> str | None:
    """The item as a label when it is a short scalar (text of one line, a number); None else."""
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int | float):
        return str(item)
    if isinstance(item, str) and item.strip() and "\n" not in item and len(item) <= MAX_LABEL:
        return item.strip()
    return None


def as_label(value: Any) -> str | None:
    """A `label:` expression's value as a label: text (clipped to one line), a number; None for
    anything else (the element is then named by its index)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        line = " ".join(value.split())
        if not line:
            return None
        return line if len(line) <= MAX_LABEL else line[: MAX_LABEL - 3] + "..."
    return None


def element_labels(label: Any, items: list[Any], context: dict[str, Any]) -> dict[int, str]:
    """Each element's label by index (those that have one): ``label`` is a step's compiled
    `label:` (None: the default), evaluated with ``item`` and ``index`` bound over ``context``.
    A label that does not evaluate falls back to the default: a name is never an error."""
    from .. import expr as ex
    from ..errors import RunnerError

    out: dict[int, str] = {}
    for index, item in enumerate(items):
        name = None
        if label is not None:
            try:
                name = as_label(ex.evaluate_value(label, {**context, "item": item, "index": index}))
            except (RunnerError, ArithmeticError, LookupError, TypeError, ValueError):
                name = None
        name = name if name is not None else default_label(item)
        if name is not None:
            out[index] = name
    return out
