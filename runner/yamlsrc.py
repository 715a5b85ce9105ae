"""YAML with source positions: every value keeps its file:line:column, duplicate keys are errors.

PyYAML silently keeps the last of two equal keys; composing the node tree ourselves lets us refuse
that and remember where every key and value stood, so later errors can point at it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import InvalidPipeline, Location

try:  # the C parser is several times faster on large pipelines
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader

Path_ = tuple[Hashable, ...]

_SCALAR_LOADER = yaml.SafeLoader("")


@dataclass
class Sourced:
    """A parsed document and where each of its parts came from."""

    file: str
    data: Any
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_ = (), *, key: bool = False) -> Location:
        """The location of the value (or, with key=True, of the key) at ``path``.

        Falls back to the nearest enclosing value we know, so an error is never placeless.
        """
        table = self.keys if key else self.values
        p = tuple(path)
        while True:
            found = table.get(p) or (self.values.get(p) if key else None)
            if found is not None:
                return Location(self.file, *found)
            if not p:
                return Location(self.file, 1, 1)
            p = p[:-1]


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


_STR_TAG = "tag:yaml.org,2002:str"


def _construct(node: yaml.Node, path: Path_, src: Sourced, depth: int = 0) -> Any:
    if depth > 200:
        raise InvalidPipeline("document nested too deeply", where=src.where(path))
    src.values[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        odd_keys = False
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InvalidPipeline(
                    "YAML merge keys (<<) are not supported",
                    where=Location(src.file, *_mark(key_node)),
                )
            if key_node.tag == _STR_TAG and depth < 200 and type(key_node) is yaml.ScalarNode:
                key: Any = key_node.value  # what the constructor returns for a plain string
            else:
                odd_keys = True
                key = _construct(key_node, (*path, "<key>"), src, depth + 1)
            if not isinstance(key, Hashable) or isinstance(key, (list, dict)):
                raise InvalidPipeline(
                    "a mapping key must be a plain value",
                    where=Location(src.file, *_mark(key_node)),
                )
            if key in out:
                first = src.keys.get((*path, key))
                where_first = f" (first at line {first[0]})" if first else ""
                raise InvalidPipeline(
                    f"duplicate key '{key}'{where_first}",
                    where=Location(src.file, *_mark(key_node)),
                )
            sub = (*path, key)  # one tuple for both tables
            src.keys[sub] = _mark(key_node)
            if value_node.tag == _STR_TAG and depth < 200 and type(value_node) is yaml.ScalarNode:
                src.values[sub] = _mark(value_node)  # most values: a string, no recursion
                out[key] = value_node.value
            else:
                out[key] = _construct(value_node, sub, src, depth + 1)
        if odd_keys:
            src.values.pop((*path, "<key>"), None)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(v, (*path, i), src, depth + 1) for i, v in enumerate(node.value)]
    if node.tag == _STR_TAG and type(node) is yaml.ScalarNode:
        return node.value  # SafeConstructor.construct_yaml_str, without its per-node cache
    try:
        return _SCALAR_LOADER.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise InvalidPipeline(
            f"cannot read value: {exc.problem}", where=Location(src.file, *_mark(node))
        ) from None


def parse_text(text: str, file: str) -> Sourced:
    """Parse YAML text into a Sourced document. Raises InvalidPipeline with a location."""
    src = Sourced(file, None)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file)
        problem = exc.problem or exc.context or "invalid YAML"
        lines = text.splitlines()
        if mark and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
            problem += " (a tab: YAML indentation must use spaces)"
        raise InvalidPipeline(f"invalid YAML: {problem}", where=where) from None
    except yaml.YAMLError as exc:
        raise InvalidPipeline(f"invalid YAML: {exc}", where=Location(file, 1, 1)) from None
    except RecursionError:
        raise InvalidPipeline("document nested too deeply", where=Location(file, 1, 1)) from None
    if node is None:
        src.data = None
        return src
    src.data = _construct(node, (), src)
    return src


def parse_file(path: Path, display: str | None = None) -> Sourced:
    """Read and parse a YAML file (UTF-8). Raises InvalidPipeline with a location."""
    name = display or str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidPipeline(f"no such file: {name}") from None
    except OSError as exc:
        raise InvalidPipeline(f"cannot read {name}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Point at the offending byte the way an editor would: line, then column in that line.
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InvalidPipeline(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            where=Location(name, line, column),
        ) from None
    return parse_text(text, name)
