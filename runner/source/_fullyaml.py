"""The full reader: libyaml's node tree composed and built into values, every position kept.

``source.parse_text`` comes here for what the line reader (``_fastyaml``) declines, and
``Sourced.where`` for the positions of a document the line reader read. Every refusal and its
position is worded here.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import InvalidPipeline, Location
from .coreschema import BOOL, FLOAT, INT, NULL, NUMBER, STR, WORDS, core_tag
from .sourced import MAX_ALIAS_CHARS, MAX_ALIAS_VALUES, MAX_DEPTH, MAX_INT_DIGITS, Path_, Sourced

_P = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _INT, _FLOAT = STR, NULL, BOOL, INT, FLOAT
_SEQ, _MAP = _P + "seq", _P + "map"
_SCALAR_TAGS = frozenset((_NULL, _BOOL, _INT, _FLOAT))
_WORDS, _NUMBER, _core_tag = WORDS, NUMBER, core_tag


class _CoreResolver(yaml.resolver.BaseResolver):
    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            return _core_tag(value) if implicit[0] else _STR
        return _SEQ if kind is yaml.SequenceNode else _MAP


try:  # the C parser is several times faster on large pipelines
    from yaml._yaml import CParser  # type: ignore[import-not-found,unused-ignore]

    _PARSER: type[Any] | None = CParser
except ImportError:  # pragma: no cover - libyaml missing
    _PARSER = None

if _PARSER is not None:

    class Composer(CParser, _CoreResolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _CoreResolver.__init__(self)

else:  # pragma: no cover - libyaml missing

    class Composer(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _CoreResolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _CoreResolver.__init__(self)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _short(tag: str) -> str:
    return "!!" + tag[len(_P) :] if tag.startswith(_P) else tag


class _Builder:
    """Builds one document's values from its node tree, recording positions in ``src``."""

    def __init__(self, src: Sourced, max_values: int) -> None:
        self.src = src
        self.max_values = max_values
        self.values = 0  # values of the collections met so far (counted a collection at a time)
        self.seen: set[int] = set()  # collection nodes built once: meeting one again is an alias
        # (values, characters of scalars) a node stands for, aliases expanded
        self.sizes: dict[int, tuple[int, int]] = {}
        self.repeated = 0  # values the aliases met so far repeat
        self.repeated_chars = 0  # characters of the scalars they repeat
        self.expanding = False  # building what an alias repeats

    def at(self, node: yaml.Node) -> Location:
        return Location(self.src.file, *_mark(node))

    def build(self, node: yaml.Node, path: Path_, depth: int = 0) -> Any:
        src = self.src
        if depth > MAX_DEPTH:
            raise InvalidPipeline("document nested too deeply", where=src.where(path))
        if type(node) is not yaml.ScalarNode:
            if id(node) not in self.seen:
                self.seen.add(id(node))
            elif not self.expanding:  # an alias: counted whole here, not again inside
                self._repeat(node, None)  # check_aliases refused a document over the bound
                self.expanding = True
                try:
                    return self.build(node, path, depth)
                finally:
                    self.expanding = False
        src.values[path] = _mark(node)
        if type(node) is not yaml.ScalarNode:
            self.values += len(node.value)
            if self.values > self.max_values:
                raise InvalidPipeline(
                    f"the document holds over {self.max_values} values",
                    where=self.at(node),
                    hint="keep large data in a file the pipeline reads (`uses: read`)",
                )
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP:
                raise self._unsupported(node)
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise self._unsupported(node)
            return [self.build(v, (*path, i), depth + 1) for i, v in enumerate(node.value)]
        return self.scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        src = self.src
        out: dict[str, Any] = {}
        odd_keys = False
        for key_node, value_node in node.value:
            if key_node.tag == _STR and type(key_node) is yaml.ScalarNode:
                key = key_node.value  # most keys: a plain string, no recursion
                if key == "<<" and not key_node.style:  # plain, not quoted
                    raise InvalidPipeline(
                        "YAML merge keys (<<) are not supported", where=self.at(key_node)
                    )
            else:
                odd_keys = True
                key = self.build(key_node, (*path, "<key>"), depth + 1)
                if not isinstance(key, str):
                    raise InvalidPipeline(
                        f"a mapping key must be a string, found {_describe(key)}",
                        where=self.at(key_node),
                        hint=None if isinstance(key, (list, dict)) else "quote it",
                    )
            if key in out:
                first = src.keys.get((*path, key))
                where_first = f" (first at line {first[0]})" if first else ""
                raise InvalidPipeline(
                    f"duplicate key '{key}'{where_first}", where=self.at(key_node)
                )
            sub = (*path, key)  # one tuple for both tables
            src.keys[sub] = _mark(key_node)
            if value_node.tag == _STR and type(value_node) is yaml.ScalarNode:
                src.values[sub] = _mark(value_node)  # most values: a string, no recursion
                out[key] = value_node.value
            else:
                out[key] = self.build(value_node, sub, depth + 1)
        if odd_keys:
            src.values.pop((*path, "<key>"), None)
        return out

    def scalar(self, node: yaml.Node) -> Any:
        tag, text = node.tag, node.value
        if tag == _STR and isinstance(text, str):
            return text
        if tag not in _SCALAR_TAGS or not isinstance(node, yaml.ScalarNode):
            raise self._unsupported(node)
        try:
            if tag == _INT:
                return self._int(node, text)
            if tag == _FLOAT:
                return self._float(node, text)
            if _WORDS.get(text) == tag:
                return None if tag == _NULL else text in ("true", "True", "TRUE")
        except ValueError:
            pass
        raise InvalidPipeline(f"'{_clip(text)}' is not a valid {_short(tag)}", where=self.at(node))

    def _int(self, node: yaml.Node, text: str) -> int:
        m = _NUMBER.fullmatch(text)
        if m is None or m.lastgroup != "int":
            raise ValueError(text)
        digits = len(text.lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise InvalidPipeline(
                f"an integer of {digits} digits is over the limit of {MAX_INT_DIGITS}",
                where=self.at(node),
                hint="quote it to keep it as text",
            )
        if text[:2] in ("0o", "0x"):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text)

    def _float(self, node: yaml.Node, text: str) -> float:
        if _NUMBER.fullmatch(text) is None:
            lowered = text.lower().lstrip("+-")
            if lowered in (".inf", ".nan"):
                raise InvalidPipeline(
                    f"'{text}' is not a number JSON can carry (no NaN or infinity)",
                    where=self.at(node),
                    hint="quote it to keep it as text",
                )
            raise ValueError(text)
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise InvalidPipeline(f"the number {_clip(text)} is out of range", where=self.at(node))
        return value

    def _unsupported(self, node: yaml.Node) -> InvalidPipeline:
        return InvalidPipeline(
            f"values tagged {_short(node.tag)} are not supported: only strings, numbers, "
            "booleans, null, lists and mappings (what JSON can carry)",
            where=self.at(node),
        )

    def check_aliases(self, root: yaml.Node) -> None:
        """Walk the node tree in document order without building anything, counting what each
        alias repeats (values, and characters of text: a long string aliased many times is as
        large as many values); refuse at the first alias past a bound (held by the key at
        ``at``)."""
        seen: set[int] = set()
        stack: list[tuple[yaml.Node, tuple[int, int] | None]] = [(root, None)]
        while stack:
            node, at = stack.pop()
            if id(node) in seen:
                self._repeat(node, Location(self.src.file, *(at or _mark(node))))
                continue
            seen.add(id(node))
            if type(node) is yaml.ScalarNode:
                continue
            if isinstance(node, yaml.MappingNode):
                for key, value in reversed(node.value):
                    stack.append((value, _mark(key)))
                    stack.append((key, _mark(key)))
            else:
                stack.extend((item, at) for item in reversed(node.value))
        self.repeated = self.repeated_chars = 0  # counted again as the values are built

    def _repeat(self, node: yaml.Node, where: Location | None) -> None:
        """An alias met: count the values and characters it repeats, refusing past the
        document's bounds."""
        values, chars = self._size(node)
        self.repeated += values
        self.repeated_chars += chars
        if where is None:
            return
        if self.repeated > MAX_ALIAS_VALUES:
            raise InvalidPipeline(
                f"aliases (*name) repeat over {MAX_ALIAS_VALUES} values in this document",
                where=where,
                hint="a document that expands this much is refused (an alias bomb?)",
            )
        if self.repeated_chars > MAX_ALIAS_CHARS:
            raise InvalidPipeline(
                f"aliases (*name) repeat over {MAX_ALIAS_CHARS:,} characters of text in this "
                "document",
                where=where,
                hint="a document that expands this much is refused (an alias bomb?); write a "
                "long text once, or keep it in a file the pipeline reads",
            )

    def _size(self, root: yaml.Node) -> tuple[int, int]:
        """(values, characters of scalars) ``root`` stands for once its aliases are expanded
        (each node measured once; stops early past the bounds)."""
        sizes = self.sizes
        if type(root) is yaml.ScalarNode:
            return 1, len(root.value)
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        open_: set[int] = set()
        while stack:
            node, done = stack.pop()
            if id(node) in sizes:
                continue
            children = _children(node)
            if done:
                open_.discard(id(node))
                total, chars = 1, 0
                for c in children:
                    if type(c) is yaml.ScalarNode:
                        total, chars = total + 1, chars + len(c.value)
                    else:
                        values, text = sizes[id(c)]
                        total, chars = total + values, chars + text
                sizes[id(node)] = (
                    min(total, MAX_ALIAS_VALUES + 1),
                    min(chars, MAX_ALIAS_CHARS + 1),
                )
                continue
            if id(node) in open_:
                raise InvalidPipeline(
                    "an alias refers to a value that contains it (a recursive alias)",
                    where=self.at(node),
                )
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if type(c) is not yaml.ScalarNode)
        return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a mapping"
    kind = {bool: "boolean", int: "integer", float: "number"}[type(value)]
    return f"{kind} {str(value).lower() if isinstance(value, bool) else value}"


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def parse_full(text: str, file: str, max_values: int) -> Sourced:
    """Compose libyaml's node tree and build the values from it, with every position."""
    src = Sourced(file, None)
    try:
        node = yaml.compose(text, Loader=Composer)  # type: ignore[arg-type]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        lines = text.splitlines()
        if mark and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
            problem += " (a tab: YAML indentation must use spaces)"
        raise InvalidPipeline(f"invalid YAML: {problem}", where=where) from None
    except yaml.reader.ReaderError as exc:
        raise InvalidPipeline(
            f"invalid YAML: {_reader_problem(exc)}", where=_reader_where(text, file, exc)
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidPipeline(f"invalid YAML: {exc}", where=Location(file, 1, 1)) from None
    except RecursionError:
        raise InvalidPipeline("document nested too deeply", where=Location(file, 1, 1)) from None
    if node is None:
        src.data = None
        return src
    builder = _Builder(src, max_values)
    if "*" in text:  # an alias is written `*name`: only then can a value repeat
        builder.check_aliases(node)
    src.data = builder.build(node, ())
    return src


def _reader_problem(exc: yaml.reader.ReaderError) -> str:
    char = exc.character
    if isinstance(char, str):
        char = ord(char) if char else 0
    if char == 0:
        return "a NUL character (byte 0x00) is not allowed in YAML text"
    return f"the control character U+{char:04X} is not allowed in YAML text"


def _reader_where(text: str, file: str, exc: yaml.reader.ReaderError) -> Location:
    """libyaml reports a byte offset into the UTF-8 text (the pure-Python reader: a character
    offset); either way, line and column as an editor counts them."""
    if _PARSER is not None:
        raw = text.encode("utf-8", "surrogatepass")
        start = raw.rfind(b"\n", 0, exc.position) + 1
        column = len(raw[start : exc.position].decode("utf-8", "replace")) + 1
        return Location(file, raw.count(b"\n", 0, exc.position) + 1, column)
    start = text.rfind("\n", 0, exc.position) + 1  # pragma: no cover - libyaml missing
    return Location(file, text.count("\n", 0, exc.position) + 1, exc.position - start + 1)
