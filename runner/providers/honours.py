"""What a provider honours: the request settings it puts on the wire for each kind of call.

A setting that nothing takes used to be sent nowhere and paid for all the same: a `size` on a
ComfyUI workflow with no width/height input came back at the workflow's size, `params` on a
ComfyUI step queued a new prompt with an unchanged graph, `params: {stream: true}` on the
OpenAI provider made the server stream a reply runner then recorded as failed. Each provider
now declares, per kind, which request fields it carries and which `params` keys it refuses; the
check before a run (engine/run/honoured.py, from `runner check` and `apply`) refuses a step that
sets anything else, at the setting's file:line:column, before any call.

Fields, as a step's `with:` names them: ``negative_prompt``, ``size``, ``seed``,
``references`` (image); ``temperature``, ``seed``, ``max_tokens``, ``format``, ``schema``,
``images`` (a message's images) (text). ``params`` keys are the service's own body fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

IMAGE_FIELDS = frozenset({"negative_prompt", "size", "seed", "references"})
TEXT_FIELDS = frozenset({"temperature", "seed", "max_tokens", "format", "schema", "images"})


@dataclass(frozen=True)
class Honours:
    """What one provider carries for one kind of call.

    ``fields``: the request fields it sends. ``missing``: for a field it does not send, what to
    do instead. ``params``: the params keys it sends (None: every key, as the service's own
    field). ``refused_params``: keys it cannot honour, each with why and what to do.
    ``seedless_varies``: calls without a seed still give different images (a service that
    samples anew), so `n:` iterations differ even where ``seed`` is not carried.
    """

    fields: frozenset[str]
    missing: Mapping[str, str] = field(default_factory=dict)
    params: frozenset[str] | None = None
    refused_params: Mapping[str, str] = field(default_factory=dict)
    seedless_varies: bool = True
    params_why: str = ""  # what to do instead of a params key it does not send
    # params keys holding a mapping whose own keys the service reads by name (Ollama's
    # ``options``): each key allowed there, and what to do with another
    nested: Mapping[str, frozenset[str]] = field(default_factory=dict)
    nested_why: str = ""

    def field_refusal(self, name: str) -> str | None:
        """Why a step may not set ``name`` on this provider (None: it is carried)."""
        if name in self.fields:
            return None
        return self.missing.get(name, "the provider has nowhere to put it")

    def param_refusal(self, key: str) -> str | None:
        """Why a step may not set ``params.<key>`` on this provider (None: it is carried)."""
        if key in self.refused_params:
            return self.refused_params[key]
        if self.params is not None and key not in self.params:
            carried = ", ".join(sorted(self.params)) or "none"
            why = f"the provider sends no such parameter (it sends: {carried})"
            return f"{why}; {self.params_why}" if self.params_why else why
        return None

    def nested_refusal(self, key: str, inner: str) -> str | None:
        """Why ``params.<key>.<inner>`` would have no effect (None: it is read)."""
        allowed = self.nested.get(key)
        if allowed is None or inner in allowed:
            return None
        return f"the service reads no such {key} entry; {self.nested_why}".rstrip("; ")

    def to_json(self) -> dict[str, object]:
        return {
            "fields": sorted(self.fields),
            "params": "any" if self.params is None else sorted(self.params),
            "refused_params": dict(sorted(self.refused_params.items())),
            "seedless_varies": self.seedless_varies,
        }


def everything(kind: str) -> Honours:
    """Every field of ``kind`` and any params: a provider that declares nothing is taken at its
    word, and the fake provider stands in for any real one."""
    return Honours(fields=IMAGE_FIELDS if kind == "image" else TEXT_FIELDS)
