"""Source text to a checked Jinja tree, and the names the tree reads."""

from __future__ import annotations

from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.parser import Parser

from .lookup import Reference as Reference
from .lookup import clip as clip
from .lookup import reference as reference
from .sandbox import environment, forbidden


def parse(source: str) -> nodes.Expr:
    """One Jinja expression, all of ``source``. Raises jinja2.TemplateSyntaxError."""
    parser = Parser(environment(), source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise jinja2.TemplateSyntaxError(
            f"unexpected '{parser.stream.current.value}' after the expression",
            parser.stream.current.lineno,
        )
    return expr


def check_names(holder: nodes.Node) -> None:
    """Every filter and test exists and no name is forbidden. Raises jinja2.TemplateSyntaxError."""
    env = environment()
    for node in holder.find_all((nodes.Filter, nodes.Test, nodes.Name)):
        if isinstance(node, nodes.Filter) and node.name not in env.filters:
            raise jinja2.TemplateSyntaxError(f"no filter named '{node.name}'", node.lineno)
        if isinstance(node, nodes.Test) and node.name not in env.tests:
            raise jinja2.TemplateSyntaxError(f"no test named '{node.name}'", node.lineno)
        if isinstance(node, nodes.Name) and forbidden(node.name):
            raise jinja2.TemplateSyntaxError(
                f"'{node.name}' is not available in the sandbox", node.lineno
            )


def refs_of(tree: nodes.Node) -> frozenset[Reference]:
    """The names ``tree`` reads, each with the attribute read from it (if any)."""
    found: set[Reference] = set()
    attrs: set[int] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        inner = getattr(node, "node", None)
        if isinstance(inner, nodes.Name) and inner.ctx == "load":
            attr: str | None = None
            if isinstance(node, nodes.Getattr):
                attr = node.attr
            elif (
                isinstance(node, nodes.Getitem)
                and isinstance(node.arg, nodes.Const)
                and isinstance(node.arg.value, str)
            ):
                attr = node.arg.value
            found.add(Reference(inner.name, attr))
            attrs.add(id(inner))
    for name in tree.find_all(nodes.Name):
        if name.ctx == "load" and id(name) not in attrs:
            found.add(Reference(name.name, None))
    return frozenset(found)


def paths_of(tree: nodes.Node) -> list[tuple[Any, ...]]:
    """Each name read with the constant attributes and indexes read from it, the longest chain
    only: ``steps.a.output.files[0].path`` is ("steps", "a", "output", "files", 0, "path"). A
    chain ends before a method called on it, and starts again above an index that is not a
    constant (``files[i].path`` gives ``files``)."""
    chains: list[tuple[Any, ...]] = []
    inner: set[int] = set()
    called = {id(n.node) for n in tree.find_all(nodes.Call)}
    lookups: list[nodes.Getattr | nodes.Getitem] = list(
        tree.find_all((nodes.Getattr, nodes.Getitem))
    )
    for node in lookups:
        inner.add(id(node.node))
    for node in lookups:
        if id(node) in inner:
            continue  # part of a longer chain
        parts: list[Any] = []
        cur: nodes.Node = node
        while isinstance(cur, (nodes.Getattr, nodes.Getitem)):
            if isinstance(cur, nodes.Getattr):
                parts.append(cur.attr)
            elif isinstance(cur.arg, nodes.Const) and isinstance(cur.arg.value, (str, int)):
                parts.append(cur.arg.value)
            else:
                parts = []  # what is read past a computed index is not known
            cur = cur.node
        if isinstance(cur, nodes.Name) and cur.ctx == "load":
            path = (cur.name, *reversed(parts))
            chains.append(path[:-1] if id(node) in called else path)
    return chains
