"""ComfyUI workflows: reading the user's API-format file and checking its substitutions.

ComfyUI's POST /prompt takes the *API format*: ``{node_id: {class_type, inputs, _meta?}}``. The
editor's own save format (``{nodes: [...], links: [...], ...}``) is refused by the server with a
confusing error, and a body saved as sent (``{"prompt": {...}, "client_id": ...}``) is not a
workflow either; both are recognised here. Inputs the server does not know are ignored by it, so a
typo in a substitution path would silently do nothing: every path must name an existing node and
an existing input of that node (the error names the nearest ones).

``substitutions`` maps a request field to one path or a list of paths (one prompt into both
``text_g`` and ``text_l``); ``reference`` lists one LoadImage node per reference image. A mapped
field the request does not carry keeps the workflow's own value.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Location
from .base import ProviderConfigError

FIELDS = ("prompt", "negative_prompt", "seed", "width", "height", "reference")
EXPORT_HINT = (
    "in ComfyUI use Workflow > Export (API) (older versions: enable the dev mode options in "
    "the settings, then 'Save (API Format)') and point 'workflow' at that file"
)


@dataclass(frozen=True)
class Target:
    """One substitution target: the ``inputs`` key ``name`` of node ``node``."""

    node: str
    name: str

    def __str__(self) -> str:
        return f"{self.node}.inputs.{self.name}"


@dataclass(frozen=True)
class Workflow:
    """A checked API-format graph and where each request field goes."""

    graph: dict[str, Any]
    targets: dict[str, tuple[Target, ...]]

    @property
    def reference_slots(self) -> int:
        return len(self.targets.get("reference", ()))

    def fill(self, values: dict[str, Any]) -> dict[str, Any]:
        """A copy of the graph with each given field put into its targets.

        ``values["reference"]`` is a list of uploaded image names, one per LoadImage target;
        fields absent from ``values`` keep the workflow's value.
        """
        graph: dict[str, Any] = json.loads(json.dumps(self.graph))  # a deep copy of plain JSON
        for field_name, targets in self.targets.items():
            if field_name not in values:
                continue
            value = values[field_name]
            if field_name == "reference":
                for target, name in zip(targets, value, strict=False):
                    graph[target.node]["inputs"][target.name] = name
                continue
            for target in targets:
                graph[target.node]["inputs"][target.name] = value
        return graph


def _fail(provider: str, message: str, where: Location | None, hint: str | None = None) -> None:
    raise ProviderConfigError(f"provider '{provider}': {message}", where=where, hint=hint)


def read_graph(path: Path, provider: str) -> dict[str, Any]:
    """The API-format graph in ``path``; a request body saved whole is unwrapped.

    Raises ProviderConfigError for an unreadable file, bad JSON, or the editor's UI format.
    """
    where = Location(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderConfigError(
            f"provider '{provider}': cannot read the workflow {path}: {exc.strerror or exc}",
            where=where,
        ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", 0)
        col = getattr(exc, "colno", 0)
        raise ProviderConfigError(
            f"provider '{provider}': the workflow is not JSON: {getattr(exc, 'msg', exc)}",
            where=Location(str(path), line, col),
        ) from None
    if isinstance(data, dict) and isinstance(data.get("prompt"), dict) and "nodes" not in data:
        data = data["prompt"]  # a saved POST /prompt body: its "prompt" is the API workflow
    if isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data:
        raise ProviderConfigError(
            f"provider '{provider}': {path.name} is a ComfyUI UI-format workflow (it has "
            "'nodes' and 'links'); the ComfyUI API takes the API format "
            "({node_id: {class_type, inputs}})",
            where=where,
            hint=EXPORT_HINT,
        )
    if not isinstance(data, dict) or not data:
        raise ProviderConfigError(
            f"provider '{provider}': {path.name} is not an API-format workflow "
            "(expected an object of nodes)",
            where=where,
            hint=EXPORT_HINT,
        )
    for node_id, node in data.items():
        if not isinstance(node, dict) or "class_type" not in node:
            raise ProviderConfigError(
                f"provider '{provider}': node '{node_id}' of {path.name} has no class_type: "
                "this is not an API-format workflow",
                where=where,
                hint=EXPORT_HINT,
            )
        if not isinstance(node.get("inputs", {}), dict):
            raise ProviderConfigError(
                f"provider '{provider}': node '{node_id}' of {path.name} has no inputs object",
                where=where,
            )
    return data


def _nearest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.4)
    return f"; did you mean '{close[0]}'?" if close else ""


def _describe(node_id: str, node: dict[str, Any]) -> str:
    title = node.get("_meta", {}).get("title") if isinstance(node.get("_meta"), dict) else None
    cls = node.get("class_type")
    return f"node '{node_id}' ({title or cls})"


def _target(
    graph: dict[str, Any],
    field_name: str,
    path: Any,
    provider: str,
    where: Location | None,
) -> Target:
    if not isinstance(path, str) or path.count(".") < 1:
        _fail(
            provider,
            f"substitution '{field_name}': {path!r} is not a path like '6.inputs.text'",
            where,
        )
    node_id, _, rest = str(path).partition(".")
    name = rest.removeprefix("inputs.")
    if node_id not in graph:
        nodes = sorted(graph, key=str)
        by_class = [f"{nid} ({graph[nid].get('class_type')})" for nid in nodes]
        _fail(
            provider,
            f"substitution '{field_name}': the workflow has no node '{node_id}'"
            f"{_nearest(node_id, nodes)}",
            where,
            hint="its nodes: " + ", ".join(by_class[:30]),
        )
    node = graph[node_id]
    inputs = node.get("inputs", {})
    if name not in inputs:
        _fail(
            provider,
            f"substitution '{field_name}': {_describe(node_id, node)} has no input '{name}'"
            f"{_nearest(name, sorted(inputs))} (ComfyUI ignores unknown inputs, so the value "
            "would be lost)",
            where,
            hint=f"its inputs: {', '.join(sorted(inputs)) or 'none'}",
        )
    if isinstance(inputs[name], list):
        _fail(
            provider,
            f"substitution '{field_name}': input '{name}' of {_describe(node_id, node)} is wired "
            f"to node '{inputs[name][0]}'; substitute into the node that holds the value",
            where,
        )
    if field_name == "reference" and node.get("class_type") != "LoadImage":
        _fail(
            provider,
            f"substitution 'reference': {_describe(node_id, node)} is not a LoadImage node; "
            "each reference image goes to the 'image' input of its own LoadImage node",
            where,
        )
    return Target(node_id, name)


# Inputs that make a job produce several images (ComfyUI's EmptyLatentImage, EmptyImage and the
# like take batch_size; RepeatLatentBatch and RepeatImageBatch take amount).
_BATCH_INPUTS = ("batch_size", "amount")


def _check_one_image(graph: dict[str, Any], provider: str, where: Location | None) -> None:
    """One call is one image (its own key, seed and ledger row): a workflow whose job makes a
    batch would have all but one image dropped, so it is refused with the way to get them."""
    for node_id in sorted(graph, key=str):
        node = graph[node_id]
        inputs = node.get("inputs") if isinstance(node, dict) else None
        if not isinstance(inputs, dict):
            continue
        for name in _BATCH_INPUTS:
            value = inputs.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                _fail(
                    provider,
                    f"{_describe(node_id, node)} makes {name} {value} images per job, and "
                    "runner takes one image per call (the others would be dropped)",
                    where,
                    hint=f"set {name} to 1 in the workflow and ask the image step for n: {value}",
                )


# ComfyUI's own nodes that put images into a job's outputs (OUTPUT_NODE = True): those that
# save (type "output") and the preview, whose images are temporary (type "temp").
_SAVES = ("SaveImage", "SaveAnimatedWEBP", "SaveAnimatedPNG")
_PREVIEWS = ("PreviewImage",)


def _check_output_node(
    graph: dict[str, Any], output_node: Any, provider: str, where: Location | None
) -> None:
    """The image runner keeps is the one the user means: ``output_node`` names a node of the
    graph, and a graph with several image outputs of the same rank (saved beats preview) must
    name one: the order of node ids decides nothing."""
    if output_node is not None:
        if str(output_node) not in {str(k) for k in graph}:
            _fail(
                provider,
                f"output_node '{output_node}' is not a node of the workflow",
                where,
                hint="nodes: " + ", ".join(_describe(k, graph[k]) for k in sorted(graph, key=str)),
            )
        return
    for classes in (_SAVES, _PREVIEWS):
        found = [
            k
            for k in sorted(graph, key=str)
            if isinstance(graph[k], dict) and graph[k].get("class_type") in classes
        ]
        if len(found) > 1:
            _fail(
                provider,
                f"the workflow has {len(found)} image outputs ("
                + ", ".join(_describe(k, graph[k]) for k in found)
                + "), and runner keeps one image per call",
                where,
                hint=f'set output_node = "{found[0]}" (or another of them) in runner.toml',
            )
        if found:
            return


def check_workflow(
    graph: dict[str, Any],
    substitutions: Any,
    provider: str,
    where: Location | None = None,
    output_node: Any = None,
) -> Workflow:
    """The graph with its substitutions and output checked. Raises ProviderConfigError naming
    the fix."""
    if not isinstance(substitutions, dict):
        _fail(provider, "substitutions must map fields to paths like '6.inputs.text'", where)
    unknown = sorted(set(substitutions) - set(FIELDS))
    if unknown:
        first = unknown[0]
        _fail(
            provider,
            f"unknown substitution field '{first}'{_nearest(first, list(FIELDS))}",
            where,
            hint=f"substitutable fields: {', '.join(FIELDS)}",
        )
    if "prompt" not in substitutions:
        _fail(provider, "substitutions must name where 'prompt' goes", where)
    _check_one_image(graph, provider, where)
    _check_output_node(graph, output_node, provider, where)
    targets: dict[str, tuple[Target, ...]] = {}
    for field_name, paths in substitutions.items():
        listed = paths if isinstance(paths, list) else [paths]
        if not listed:
            _fail(provider, f"substitution '{field_name}' names no path", where)
        found = tuple(_target(graph, field_name, p, provider, where) for p in listed)
        if len(set(found)) != len(found):
            _fail(provider, f"substitution '{field_name}' names the same input twice", where)
        targets[field_name] = found
    return Workflow(graph=graph, targets=targets)
