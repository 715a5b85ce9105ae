"""What a step's output holds, declared by its type: the shapes the compiler checks every
``steps.ID.output...`` and ``output...`` reference against, and a run's outputs are held to.

A shape is deliberately small: a scalar kind, a list of one item shape, or an object whose
fields are known (``closed``: any other field is a mistake) or not (``open``: a mapping whose
keys are data, such as a shell step's ``files`` or a card). ``ANY`` is what nothing is known
of. Reading a field a closed object has not is caught at compile time, with a did-you-mean;
nothing else is refused, so a declaration can be loose but never wrong.

A type's shape comes from its ``output_doc`` by default: each entry's first words say its kind
("string: ...", "list of strings: ...", "mapping: ..."). A type whose output depends on its
arguments (``read``'s glob or path, ``llm``'s ``schema:``) builds it in ``output_shape``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shape:
    """``kind``: any, string, integer, number, boolean, list or object. A list has ``item``;
    an object has ``fields`` and ``closed`` (only those fields exist)."""

    kind: str
    item: Shape | None = None
    fields: Mapping[str, Shape] = field(default_factory=dict)
    closed: bool = False

    def describe(self) -> str:
        if self.kind == "list":
            inner = self.item.describe() if self.item is not None else "any"
            return "a list" if inner == "any" else f"a list of {inner}s"
        if self.kind == "object":
            return "an object" if self.closed else "a mapping"
        return {"any": "any value", "integer": "an integer"}.get(self.kind, f"a {self.kind}")


def spell(shape: Shape | None) -> str:
    """The shape in words, for the step reference: ``list of objects (ordinal, seed, ...)``."""
    if shape is None or shape.kind == "any":
        return "any"
    if shape.kind == "list":
        inner = spell(shape.item)
        return "list" if inner == "any" else f"list of {inner}"
    if shape.kind == "object":
        if not shape.closed:
            return "mapping"
        return "object (" + ", ".join(f"`{k}`" for k in shape.fields) + ")"
    return shape.kind


ANY = Shape("any")
STRING = Shape("string")
INTEGER = Shape("integer")
NUMBER = Shape("number")
BOOLEAN = Shape("boolean")
MAPPING = Shape("object")  # keys are data: any field may be read


def closed(**fields: Shape) -> Shape:
    return Shape("object", fields=fields, closed=True)


def list_of(item: Shape = ANY) -> Shape:
    return Shape("list", item=item)


_DOC_KINDS: list[tuple[re.Pattern[str], Shape]] = [
    (re.compile(r"^list of strings\b"), list_of(STRING)),
    (re.compile(r"^list\b"), list_of(ANY)),
    (re.compile(r"^(mapping|object)\b"), MAPPING),
    (re.compile(r"^string\b"), STRING),
    (re.compile(r"^integer\b"), INTEGER),
    (re.compile(r"^number\b"), NUMBER),
    (re.compile(r"^boolean\b"), BOOLEAN),
]


def from_doc(doc: Mapping[str, str]) -> Shape:
    """The closed object an ``output_doc`` describes; an entry whose words name no kind holds
    any value. An empty doc (a plug-in that documents nothing) declares nothing: ANY."""
    if not doc:
        return ANY
    # A type's output_doc is a constant of its class: its shape is read once, not for each of
    # a pipeline's thousand steps of the type (the doc is kept, so its id is not reused).
    known = _FROM_DOC.get(id(doc))
    if known is not None and known[0] is doc and known[1] == dict(doc):
        return known[2]
    fields: dict[str, Shape] = {}
    for name, text in doc.items():
        fields[name] = next((s for pattern, s in _DOC_KINDS if pattern.match(text)), ANY)
    shape = Shape("object", fields=fields, closed=True)
    _FROM_DOC[id(doc)] = (doc, dict(doc), shape)
    return shape


_FROM_DOC: dict[int, tuple[Mapping[str, str], dict[str, str], Shape]] = {}


def from_json_schema(schema: Any) -> Shape:
    """The shape a JSON Schema promises: an object is closed only where the schema says
    ``additionalProperties: false``; whatever it does not pin down is ANY."""
    if not isinstance(schema, Mapping):
        return ANY
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties")
        fields = (
            {str(k): from_json_schema(v) for k, v in props.items()}
            if isinstance(props, Mapping)
            else {}
        )
        return Shape("object", fields=fields, closed=schema.get("additionalProperties") is False)
    if kind == "array":
        return list_of(from_json_schema(schema.get("items")))
    if kind in ("string", "integer", "number", "boolean"):
        return Shape(str(kind))
    return ANY


def conforms(value: Any, shape: Shape, where: str = "output") -> list[str]:
    """Where ``value`` breaks ``shape`` (empty when it holds): a run's output checked against
    what its type declares. A null is allowed anywhere (a field a mode does not fill)."""
    if value is None or shape.kind == "any":
        return []
    kinds: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
        "list": list,
        "object": dict,
    }
    expected = kinds[shape.kind]
    if not isinstance(value, expected) or (
        shape.kind in ("integer", "number") and isinstance(value, bool)
    ):
        return [f"{where} is {type(value).__name__}, declared {shape.describe()}"]
    found: list[str] = []
    if isinstance(value, list) and shape.item is not None:
        for i, v in enumerate(value):
            found += conforms(v, shape.item, f"{where}[{i}]")
    if isinstance(value, dict):
        for k, v in value.items():
            sub = shape.fields.get(k)
            if sub is None:
                if shape.closed:
                    found.append(f"{where}.{k} is not declared")
                continue
            found += conforms(v, sub, f"{where}.{k}")
    return found
