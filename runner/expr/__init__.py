"""One expression language for ``${{ }}``, ``when``, ``check`` and templates.

Jinja2 expressions, compiled once when the pipeline compiles and evaluated in a hardened
ImmutableSandboxedEnvironment: StrictUndefined, no globals but a bounded ``range``, and every
evaluation or render runs under a budget (loop iterations + calls, produced characters, wall
time) so nothing a pipeline or its data says can take unbounded time or memory. Values that come
from data (an LLM reply, a document) are only ever passed in as variables, never compiled.

The package, one concern a file (audit the sandbox by reading ``sandbox``):

- ``sandbox``: the hardened environment, its limits and the budget;
- ``lookup``: what a plain dotted lookup needs (limits, names, references), without Jinja;
- ``parsing``: source text to a checked tree, and the names it reads;
- ``shapes``, ``sharing``: parsing and compiling each expression shape once;
- ``compiling``: ``Expression`` and ``compile_expression``;
- ``values``: ``with:`` values holding ``${{ }}``;
- ``templates``: template files and inline templates, read from the root only;
- ``rules`` and ``checks/``: rules (``when``, ``checks``) compiled from YAML, one check a module;
- ``shellquote`` (with ``_shellscan``, ``_shellgrammar``, ``_shellcode``): values placed into a
  ``/bin/sh`` command as data, refused where no quoting keeps them so; ``shellrun`` starts one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .compiling import Expression, compile_expression
    from .lookup import Reference
    from .sandbox import (
        MAX_ELEMENTS,
        MAX_EXPRESSION_CHARS,
        MAX_NESTING,
        MAX_RANGE,
        MAX_RESULT_CHARS,
        MAX_SECONDS,
        MAX_STEPS,
        MAX_TEMPLATE_CHARS,
        HardenedEnvironment,
        SandboxRefused,
        environment,
    )
    from .templates import render_template, template_environment, template_variables
    from .values import (
        Compiled,
        Interpolation,
        compile_value,
        evaluate_value,
        is_static,
        iter_expressions,
    )

# Each name is imported from its module on first use (PEP 562): a pipeline of shell steps with no
# ``${{ }}`` never needs jinja2, and importing it costs ~20-50 ms of every `runner` start-up.
_HOME = {
    "Expression": "compiling",
    "compile_expression": "compiling",
    "Reference": "lookup",
    "MAX_ELEMENTS": "sandbox",
    "MAX_EXPRESSION_CHARS": "sandbox",
    "MAX_NESTING": "sandbox",
    "MAX_RANGE": "sandbox",
    "MAX_RESULT_CHARS": "sandbox",
    "MAX_SECONDS": "sandbox",
    "MAX_STEPS": "sandbox",
    "MAX_TEMPLATE_CHARS": "sandbox",
    "HardenedEnvironment": "sandbox",
    "SandboxRefused": "sandbox",
    "environment": "sandbox",
    "render_template": "templates",
    "template_environment": "templates",
    "template_variables": "templates",
    "Compiled": "values",
    "Interpolation": "values",
    "compile_value": "values",
    "evaluate_value": "values",
    "is_static": "values",
    "iter_expressions": "values",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


__all__ = [
    "MAX_ELEMENTS",
    "MAX_EXPRESSION_CHARS",
    "MAX_NESTING",
    "MAX_RANGE",
    "MAX_RESULT_CHARS",
    "MAX_SECONDS",
    "MAX_STEPS",
    "MAX_TEMPLATE_CHARS",
    "Compiled",
    "Expression",
    "HardenedEnvironment",
    "Interpolation",
    "Reference",
    "SandboxRefused",
    "compile_expression",
    "compile_value",
    "environment",
    "evaluate_value",
    "is_static",
    "iter_expressions",
    "render_template",
    "template_environment",
    "template_variables",
]
