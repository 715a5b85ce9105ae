"""Declared = delivered, before any call: a step asks its provider only for what it honours.

Each provider says which request settings it carries for each kind of call
(providers/honours.py); each llm and image step says which settings it asks for
(``settings_asked``). A setting the provider would drop (a size a ComfyUI workflow has no
input for, a negative prompt OpenAI's images API has no field for, ``params`` a ComfyUI step
cannot pass, ``stream`` that the OpenAI provider cannot read) is an error at the setting's
file:line:column with what to do, from `runner check` and before `runner apply` runs anything.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidPipeline


def check_honoured(
    plan: Any, step: Any, args: dict[str, Any], provider: Any, name: str, kind: str
) -> None:
    """Raise InvalidPipeline at the first setting of ``step`` (its params-known ``args``) that
    ``provider`` (configured as ``name``) does not carry for calls of ``kind``."""
    asked = getattr(step.type, "settings_asked", None)
    if asked is None:
        return
    honours = provider.honours(kind)
    for setting, path in asked(args).items():
        if setting.startswith("params."):
            key = setting.removeprefix("params.")
            why = honours.param_refusal(key)
            inner = (args.get("params") or {}).get(key)
            if why is None and isinstance(inner, dict):
                for name in inner:
                    why = honours.nested_refusal(key, str(name))
                    if why is not None:
                        setting, path = f"{setting}.{name}", (*path, name)
                        break
        else:
            why = honours.field_refusal(setting)
        if why is not None:
            raise InvalidPipeline(
                f"provider '{name}' does not carry `{setting}`: it would be paid for and "
                "have no effect",
                where=_where(plan, step, path),
                step=step.id,
                hint=why,
            )
    # runner.toml's own params for the provider go into every request just the same.
    base = getattr(provider, "settings", {}).get("params")
    for key in base if isinstance(base, dict) else ():
        why = honours.param_refusal(str(key))
        if why is not None:
            raise InvalidPipeline(
                f"provider '{name}' does not carry `params.{key}` set in runner.toml's "
                f"[providers.{name}]: every call would pay for it to have no effect",
                where=step.where,
                step=step.id,
                hint=why,
            )
    n = args.get("n", 1)
    varies = honours.seedless_varies or "seed" in honours.fields
    if kind == "image" and isinstance(n, int) and n > 1 and not varies:
        raise InvalidPipeline(
            f"provider '{name}' takes no seed, so the {n} images would be one request sent {n} "
            "times, giving the same picture",
            where=_where(plan, step, ("n",)),
            step=step.id,
            hint=honours.field_refusal("seed"),
        )


def _where(plan: Any, step: Any, path: tuple[Any, ...]) -> Any:
    """The file:line:column of ``with:``'s value at ``path`` (its nearest written part)."""
    raw = (plan.doc.data.get("steps") or {}).get(step.id)
    node: Any = raw.get("with") if isinstance(raw, dict) else None
    found: list[Any] = []
    for part in path:
        at_key = isinstance(node, dict) and part in node
        at_index = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if at_key or at_index:
            node = node[part]
        else:
            break
        found.append(part)
    return plan.doc.where("steps", step.id, "with", *found) if found else step.where
