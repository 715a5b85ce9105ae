"""YAML 1.2's core schema: which tag a plain (unquoted, untagged) scalar resolves to.

Shared by the full reader (``source``) and the line reader (``_fastyaml``), so both read a
scalar the same way.
"""

from __future__ import annotations

import re

_P = "tag:yaml.org,2002:"
STR, NULL, BOOL, INT, FLOAT = (_P + t for t in ("str", "null", "bool", "int", "float"))

# Plain scalars that are not strings in the core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
WORDS = {
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), NULL),
    **dict.fromkeys(("true", "True", "TRUE", "false", "False", "FALSE"), BOOL),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), FLOAT),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"), FLOAT),
}
NUMBER = re.compile(
    r"(?P<int>[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)"
    r"|(?P<float>[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)"
)
_NUMERIC_START = frozenset("0123456789+-.")


def core_tag(value: str) -> str:
    """The core schema's tag for a plain scalar."""
    found = WORDS.get(value)
    if found is not None:
        return found
    if value[0] in _NUMERIC_START:
        m = NUMBER.fullmatch(value)
        if m is not None:
            return INT if m.lastgroup == "int" else FLOAT
    return STR
