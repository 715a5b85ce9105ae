"""Read a card spec YAML file keeping where every key and value stood (1-based line:column).

Spec errors must point at the line that caused them, so the document is composed node by node
(``yaml.compose``) instead of ``yaml.safe_load``, which forgets positions. Duplicate keys are
refused: PyYAML would silently keep the last one.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import InvalidPipeline, Location

Path_ = tuple[Hashable, ...]

_SCALARS = yaml.SafeLoader("")  # used only to construct scalar values from composed nodes


@dataclass
class Positioned:
    """A parsed document plus the position of each value (and key) by its path."""

    file: str
    data: Any
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_ = (), *, key: bool = False) -> Location:
        """Location of the value at ``path`` (of its key with ``key=True``); nearest known parent
        when the path itself was not in the file."""
        p = tuple(path)
        while True:
            if key and p in self.keys:
                return Location(self.file, *self.keys[p])
            if p in self.values:
                return Location(self.file, *self.values[p])
            if not p:
                return Location(self.file, 1, 1)
            p = p[:-1]


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _build(node: yaml.Node, path: Path_, doc: Positioned, depth: int) -> Any:
    if depth > 100:
        raise InvalidPipeline("card spec nested too deeply", where=doc.where(path))
    doc.values[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            where = Location(doc.file, *_mark(key_node))
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                raise InvalidPipeline("a mapping key must be a plain scalar", where=where)
            key = _SCALARS.construct_object(key_node)
            if key in out:
                raise InvalidPipeline(f"duplicate key '{key}'", where=where)
            doc.keys[(*path, key)] = _mark(key_node)
            out[key] = _build(value_node, (*path, key), doc, depth + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, (*path, i), doc, depth + 1) for i, v in enumerate(node.value)]
    try:
        return _SCALARS.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise InvalidPipeline(
            f"cannot read value: {exc.problem}", where=Location(doc.file, *_mark(node))
        ) from None


def parse_text(text: str, file: str) -> Positioned:
    """Parse YAML text; raises InvalidPipeline at file:line:column on a syntax error."""
    doc = Positioned(file, None)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        raise InvalidPipeline(
            f"invalid YAML: {exc.problem or exc.context or 'syntax error'}", where=where
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidPipeline(f"invalid YAML: {exc}", where=Location(file, 1, 1)) from None
    if node is not None:
        doc.data = _build(node, (), doc, 0)
    return doc


def parse_file(path: Path) -> Positioned:
    """Read and parse ``path``; unreadable or non-UTF-8 files raise InvalidPipeline."""
    name = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise InvalidPipeline(f"no such card spec: {name}") from None
    except UnicodeDecodeError as exc:
        raise InvalidPipeline(f"not UTF-8 (byte {exc.start})", where=Location(name, 1, 1)) from None
    except OSError as exc:
        raise InvalidPipeline(f"cannot read card spec {name}: {exc.strerror}") from None
    return parse_text(text, name)
